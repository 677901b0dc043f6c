"""docs/check.md's example reports are what ``scalar-scales check`` prints for the checkpoints they describe."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

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
