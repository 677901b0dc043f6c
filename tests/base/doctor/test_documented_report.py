"""docs/check.md's example reports are what ``scalar-scales check`` prints for the checkpoints they describe."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest

from scalar_scales.doctor import RULES
from scalar_scales_testkit.broken import mla_checkpoint, rewrite_shard, shard_of
from scalar_scales_testkit.cli import make_checkpoint, run_cli_in_process

DOC = Path(__file__).resolve().parents[3] / "docs" / "check.md"
OTHER_CONVENTION = "model.layers.0.mlp.experts.0.down_proj.weight_global_scale"


def documented_report(heading_start: str) -> list[str]:
    """The lines of docs/check.md's code block whose first line starts with ``heading_start``."""
    blocks = re.findall(r"^```\n(.*?)^```$", DOC.read_text(), flags=re.MULTILINE | re.DOTALL)
    (block,) = [block for block in blocks if block.startswith(heading_start)]
    return block.splitlines()


def matches(documented: list[str], printed: list[str]) -> bool:
    """``printed`` is ``documented``, where a documented line ``    ...`` stands for one or more finding lines."""
    pattern = "\n".join(r"(    .*\n?)+" if line == "    ..." else re.escape(line) + r"\n?" for line in documented)
    return re.fullmatch(pattern.replace("\n?\n", "\n"), "\n".join(printed) + "\n") is not None


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def check_text(path: str) -> list[str]:
    return run_cli_in_process("check", path, env={"COLUMNS": None}).stdout.splitlines()


def test_the_documented_report_of_a_legacy_checkpoint_with_a_scale_in_the_other_convention_is_printed(in_tmp):
    checkpoint = make_checkpoint(in_tmp / "ckpt")

    def other_convention(tensors) -> None:
        tensors[OTHER_CONVENTION]["data"] = struct.pack("<f", 0.0004)

    rewrite_shard(shard_of(checkpoint, OTHER_CONVENTION), other_convention)
    printed = check_text("ckpt")
    assert matches(documented_report("ckpt: 3 shards, nvfp4-pack-quantized, no format_version"), printed), printed


def test_the_documented_report_of_a_clean_checkpoint_is_printed(in_tmp):
    make_checkpoint(in_tmp / "ckpt")
    assert run_cli_in_process("migrate", "ckpt").returncode == 0
    printed = check_text("ckpt")
    assert printed == documented_report("ckpt: 3 shards, nvfp4-pack-quantized, format_version 2")


def test_the_documented_report_of_a_checkpoint_engines_do_not_load_is_printed(in_tmp):
    """The GLM-4-MoE-Lite checkpoint with 0-D scales in its fused MLA a-projections, of "Engines that do not load
    it"."""
    mla_checkpoint(in_tmp / "glm", "Glm4MoeLiteForCausalLM")
    assert check_text("glm") == documented_report("glm: 3 shards")


def documented(value: object, printed: object) -> bool:
    """``printed`` is the documented JSON ``value``: a string ending ``...`` stands for any string it starts, and
    ``"..."`` in a list for any elements between its neighbours; an object has the documented keys, in order."""
    if isinstance(value, str) and value.endswith("..."):
        return isinstance(printed, str) and printed.startswith(value.removesuffix("..."))
    if isinstance(value, list) and "..." in value:
        cut = value.index("...")
        head, tail = value[:cut], value[cut + 1 :]
        return (
            isinstance(printed, list)
            and len(printed) > len(head) + len(tail)
            and documented(head, printed[: len(head)])
            and documented(tail, printed[len(printed) - len(tail) :])
        )
    if isinstance(value, list):
        return isinstance(printed, list) and len(value) == len(printed) and all(map(documented, value, printed))
    if isinstance(value, dict):
        return (
            isinstance(printed, dict)
            and list(value) == list(printed)
            and all(documented(value[key], printed[key]) for key in value)
        )
    return value == printed


def test_the_documented_json_document_is_printed(in_tmp):
    """The JSON section's example: a migrated checkpoint with an input scale of 0, checked by its absolute path
    (``/ckpt`` in the docs)."""
    checkpoint = make_checkpoint(in_tmp / "ckpt")
    zero = "model.layers.1.mlp.experts.2.down_proj.input_global_scale"

    def zeroed(tensors) -> None:
        tensors[zero]["data"] = struct.pack("<f", 0.0)

    rewrite_shard(shard_of(checkpoint, zero), zeroed)
    assert run_cli_in_process("migrate", checkpoint).returncode == 0
    printed = run_cli_in_process("check", checkpoint, "--output-format", "json").stdout
    (block,) = re.findall(r"^```json\n(.*?)^```$", DOC.read_text(), flags=re.MULTILINE | re.DOTALL)
    assert documented(json.loads(block), json.loads(printed.replace(str(checkpoint), "/ckpt"))), printed


def test_the_documented_usage_names_every_option_check_takes():
    """docs/check.md's usage block names each option ``scalar-scales check --help``'s usage does, and none its help
    lacks."""
    help_text = run_cli_in_process("check", "--help", env={"COLUMNS": "200"}).stdout
    (block,) = [
        block
        for block in re.findall(r"^```\n(.*?)^```$", DOC.read_text(), flags=re.MULTILINE | re.DOTALL)
        if block.startswith("scalar-scales check PATH...")
    ]
    option = r"(?<![\w-])--?[a-z][a-z-]*"
    documented_options = set(re.findall(option, block))
    assert set(re.findall(option, help_text.split("\n\n", 1)[0])) - {"-h"} <= documented_options
    assert documented_options <= set(re.findall(option, help_text))


def test_the_rules_with_a_fix_are_those_the_docs_name():
    """docs/check.md, Output: a group's line names a fix where the rule has one, NV101 to NV103 (a command) and
    NV607 to NV613 (in words); the other rules' lines name none."""
    text = " ".join(DOC.read_text(encoding="utf-8").split())
    ranges = re.search(r"the rule has one \(((?:NV\d{3} to NV\d{3}(?:, )?)+)\), its fix", text)
    assert ranges is not None
    named = [
        f"NV{number}"
        for first, last in re.findall(r"NV(\d{3}) to NV(\d{3})", ranges.group(1))
        for number in range(int(first), int(last) + 1)
    ]
    commands = ["NV101", "NV102", "NV103"]
    assert [code for code, rule in RULES.items() if rule.fixable] == commands == named[:3]
    assert [code for code, rule in RULES.items() if rule.fix is not None] == named
