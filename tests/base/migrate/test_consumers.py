"""`scalar-scales migrate` names, before it writes, what its change does for each consumer the round trip observed
(``scalar_scales.consumers``, generated from docs/compatibility.md's run), as that consumer was seen to load checkpoints
of the old shape and of the new."""

from __future__ import annotations

import json

from scalar_scales.consumers import NO_FIX, OBSERVED
from scalar_scales.migration import migrate_checkpoint
from scalar_scales_testkit.broken import mla_checkpoint
from scalar_scales_testkit.cli import run_cli_in_process, shards, snapshot

HEADING = "What this changes for each consumer, as released unless a fix is named (docs/compatibility.md):"


def transformers_without_the_patch() -> list[str]:
    return [o.consumer for o in OBSERVED if o.family == "transformers" and o.fix == NO_FIX]


def test_migrating_names_transformers_without_the_patch_whose_decompression_changes(checkpoint):
    lines = run_cli_in_process("migrate", checkpoint).stdout.splitlines()
    assert lines[0] == HEADING
    for consumer in transformers_without_the_patch():
        assert f"  {consumer}: loads -> loads, decompressed weights differ from legacy" in lines


def test_migrating_names_the_loader_that_copies_into_0_d_slots_which_then_loads(checkpoint):
    (copy_loader,) = (o for o in OBSERVED if o.family == "copy_" and o.fix == NO_FIX)
    line = f"  {copy_loader.consumer}: fails: {copy_loader.legacy.note} -> loads"
    assert line in run_cli_in_process("migrate", checkpoint).stdout


def test_consumers_the_change_does_nothing_to_are_not_named(checkpoint):
    unchanged = [o for o in OBSERVED if o.architecture is None and o.legacy == o.scalar]
    assert unchanged
    shown = run_cli_in_process("migrate", checkpoint).stdout.splitlines()
    for observation in unchanged:
        fix = "" if observation.fix == NO_FIX else f" with {observation.fix}"
        assert not any(line.startswith(f"  {observation.consumer}{fix}:") for line in shown)


def test_migrating_a_legacy_deepseek_checkpoint_says_sglang_then_loads_it(tmp_path):
    checkpoint = mla_checkpoint(tmp_path / "deepseek", "DeepseekV3ForCausalLM", to="legacy")
    (sglang,) = (o for o in OBSERVED if o.architecture == "DeepseekV3ForCausalLM" and o.fix == NO_FIX)
    assert (
        f"  {sglang.consumer}: fails: {sglang.legacy.note} -> loads" in run_cli_in_process("migrate", checkpoint).stdout
    )


def test_migrating_a_glm_checkpoint_says_sglang_fails_on_either_shape(tmp_path):
    checkpoint = mla_checkpoint(tmp_path / "glm", "Glm4MoeLiteForCausalLM", to="legacy")
    (sglang,) = (o for o in OBSERVED if o.architecture == "Glm4MoeLiteForCausalLM" and o.fix == NO_FIX)
    line = f"  {sglang.consumer}: fails: {sglang.legacy.note} -> fails: {sglang.scalar.note}"
    assert line in run_cli_in_process("migrate", checkpoint).stdout


def test_the_consumers_are_named_before_any_file_changes(checkpoint):
    before = snapshot(checkpoint)
    seen = []
    migrate_checkpoint(checkpoint, announce=lambda report: seen.append((report.consumers, snapshot(checkpoint))))
    ((consumers, at_announcement),) = seen
    assert consumers and at_announcement == before != snapshot(checkpoint)


def test_a_refused_migration_names_no_consumer(checkpoint):
    shards(checkpoint)[0].chmod(0o444)
    result = run_cli_in_process("migrate", checkpoint)
    assert result.returncode == 2 and result.stdout == ""


def test_a_dry_run_says_what_the_change_would_do(checkpoint):
    lines = run_cli_in_process("migrate", "--dry-run", checkpoint).stdout.splitlines()
    assert lines[0] == HEADING.replace("this changes", "this would change")
    assert f"  {transformers_without_the_patch()[0]}: loads -> loads, decompressed weights differ from legacy" in lines


def test_migrating_back_to_legacy_says_what_that_undoes(checkpoint):
    migrate_checkpoint(checkpoint)
    lines = run_cli_in_process("migrate", "--to", "legacy", checkpoint).stdout.splitlines()
    assert f"  {transformers_without_the_patch()[0]}: loads, decompressed weights differ from legacy -> loads" in lines


def test_nothing_to_change_names_no_consumer(checkpoint):
    migrate_checkpoint(checkpoint)
    assert "consumer" not in run_cli_in_process("migrate", checkpoint).stdout


def test_json_lists_each_consumer_changed_before_and_after(checkpoint):
    document = json.loads(run_cli_in_process("migrate", "--json", checkpoint).stdout)
    consumer = transformers_without_the_patch()[0]
    assert {
        "consumer": consumer,
        "fix": NO_FIX,
        "before": "loads",
        "after": "loads, decompressed weights differ from legacy",
    } in document["consumers_changed"]
