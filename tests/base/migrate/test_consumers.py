"""`scalar-scales migrate` names, before it writes, what its change does for each consumer the round trip observed
(``scalar_scales.consumers``, generated from docs/compatibility.md's run), as that consumer was seen to load checkpoints
of the old shape and of the new."""

from __future__ import annotations

import json
from pathlib import Path

from scalar_scales.consumers import NO_FIX, OBSERVED, Observation
from scalar_scales.migration import migrate_checkpoint
from scalar_scales_testkit.broken import mla_checkpoint
from scalar_scales_testkit.cli import run_cli_in_process, shards, snapshot

HEADING = "What this changes for the consumers the round trip observed: "


def transformers_without_the_patch() -> list[str]:
    return [o.consumer for o in OBSERVED if o.family == "transformers" and o.fix == NO_FIX]


def released(family: str, architecture: str | None = None) -> Observation:
    (observation,) = (o for o in OBSERVED if o.family == family and o.fix == NO_FIX and o.architecture == architecture)
    return observation


def line_of(lines: list[str], consumer: str) -> str:
    """The announcement's line that names ``consumer`` (a line names the consumers that share its change)."""
    (line,) = (line for line in lines if line.startswith("  ") and consumer in line[2:].split(": ")[0].split(", "))
    return line


def stopping_at_0_d() -> list[str]:
    """The consumers, without a fix, seen to load (1,) global scales and not 0-D ones (transformers 5.25.0's
    from_pretrained, which refuses a 0-D scale for its (1,) parameter)."""
    return [
        o.consumer
        for o in OBSERVED
        if o.architecture is None and o.fix == NO_FIX and o.legacy.loads and not o.scalar.loads
    ]


def test_the_heading_counts_the_consumers_that_stop_loading_a_legacy_checkpoint_migrated_to_0_d(checkpoint):
    lines = run_cli_in_process("migrate", checkpoint).stdout.splitlines()
    assert stopping_at_0_d()
    assert lines[0] == HEADING + f"{len(stopping_at_0_d())} stops loading the checkpoint"


def test_a_consumer_that_stops_loading_a_migrated_checkpoint_is_named_first_with_its_error(checkpoint):
    lines = run_cli_in_process("migrate", checkpoint).stdout.splitlines()
    (stopping,) = (o for o in OBSERVED if o.consumer == stopping_at_0_d()[0] and o.fix == NO_FIX)
    assert lines[1].startswith(f"  {stopping.consumer}: stops loading it: {stopping.scalar.note}")


def test_migrating_names_transformers_without_the_patch_whose_decompression_changes(checkpoint):
    lines = run_cli_in_process("migrate", checkpoint).stdout.splitlines()
    transformers = ", ".join(transformers_without_the_patch())
    expected = f"  {transformers}: still loads it; now decompressed weights differ from legacy"
    assert line_of(lines, transformers_without_the_patch()[0]).startswith(expected)


def test_a_fix_with_which_the_consumer_loads_both_shapes_alike_is_named_as_changing_nothing(checkpoint):
    lines = run_cli_in_process("migrate", checkpoint).stdout.splitlines()
    assert line_of(lines, transformers_without_the_patch()[0]).endswith(
        "; with compressed_tensors_patch, nothing changes"
    )


def test_migrating_says_the_loader_that_copies_into_0_d_slots_starts_loading_it(checkpoint):
    copy_loader = released("copy_")
    lines = run_cli_in_process("migrate", checkpoint).stdout.splitlines()
    assert line_of(lines, copy_loader.consumer) == (
        f"  {copy_loader.consumer}: starts loading it (it failed: {copy_loader.legacy.note}); with "
        "vllm_patch.to_scalar, nothing changes"
    )


def test_consumers_the_change_does_nothing_to_are_said_to_load_either_shape(checkpoint):
    unchanged = [o.consumer for o in OBSERVED if o.architecture is None and o.fix == NO_FIX and o.legacy == o.scalar]
    assert unchanged
    lines = run_cli_in_process("migrate", checkpoint).stdout.splitlines()
    assert f"  {', '.join(unchanged)}: nothing changes, it loads either shape" in lines


def test_each_consumer_observed_for_every_model_is_named_once(checkpoint):
    lines = run_cli_in_process("migrate", checkpoint).stdout.splitlines()[1:-1]
    named = [name for line in lines for name in line[2:].split(": ")[0].split(", ")]
    assert sorted(named) == sorted({o.consumer for o in OBSERVED if o.architecture is None})


def test_migrating_a_legacy_deepseek_checkpoint_says_sglang_then_loads_it(tmp_path):
    checkpoint = mla_checkpoint(tmp_path / "deepseek", "DeepseekV3ForCausalLM", to="legacy")
    sglang = released("sglang", "DeepseekV3ForCausalLM")
    lines = run_cli_in_process("migrate", checkpoint).stdout.splitlines()
    assert line_of(lines, sglang.consumer) == (
        f"  {sglang.consumer}: starts loading it (it failed: {sglang.legacy.note}); with sglang_patch plugin, nothing "
        "changes"
    )


def test_migrating_a_glm_checkpoint_says_sglang_fails_on_either_shape(tmp_path):
    checkpoint = mla_checkpoint(tmp_path / "glm", "Glm4MoeLiteForCausalLM", to="legacy")
    sglang = released("sglang", "Glm4MoeLiteForCausalLM")
    lines = run_cli_in_process("migrate", checkpoint).stdout.splitlines()
    assert line_of(lines, sglang.consumer).startswith(
        f"  {sglang.consumer}: fails on either shape, now: {sglang.scalar.note} (it failed: {sglang.legacy.note})"
    )


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
    assert lines[0] == HEADING.replace("this changes", "this would change") + (
        f"{len(stopping_at_0_d())} would stop loading the checkpoint"
    )


def test_migrating_back_to_legacy_says_in_the_heading_that_a_consumer_stops_loading_it(checkpoint):
    migrate_checkpoint(checkpoint)
    lines = run_cli_in_process("migrate", "--to", "legacy", checkpoint).stdout.splitlines()
    assert lines[0] == HEADING + "1 stops loading the checkpoint"


def test_migrating_back_to_legacy_names_the_consumer_that_stops_loading_it_first(checkpoint):
    migrate_checkpoint(checkpoint)
    copy_loader = released("copy_")
    lines = run_cli_in_process("migrate", "--to", "legacy", checkpoint).stdout.splitlines()
    assert lines[1] == f"  {copy_loader.consumer}: stops loading it: {copy_loader.legacy.note}; with " + (
        "vllm_patch.to_scalar, nothing changes"
    )


def test_migrating_back_to_legacy_says_what_that_undoes(checkpoint):
    migrate_checkpoint(checkpoint)
    lines = run_cli_in_process("migrate", "--to", "legacy", checkpoint).stdout.splitlines()
    assert line_of(lines, transformers_without_the_patch()[0]).startswith(
        f"  {', '.join(transformers_without_the_patch())}: still loads it; no longer: decompressed weights differ "
        "from legacy"
    )


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


def test_docs_migrate_md_shows_the_announcement_as_migrate_prints_it(checkpoint):
    document = (Path(__file__).parents[3] / "docs" / "migrate.md").read_text()
    block = document.split("```\nWhat this changes", 1)[1].split("```", 1)[0]
    shown = ("What this changes" + block).splitlines()
    printed = run_cli_in_process("migrate", checkpoint).stdout.replace(str(checkpoint), "ckpt").splitlines()
    assert shown == printed
