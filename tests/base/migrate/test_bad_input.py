"""Every malformed input: exit 2, one line naming the file and the problem, no traceback, no byte changed."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from scalar_scales_testkit.cli import (
    holding_the_lock,
    make_checkpoint,
    rewrite_header,
    run_cli_in_process,
    shards,
    snapshot,
)


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:5])


def header_length_beyond_file(path: Path) -> None:
    raw = path.read_bytes()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw[8:])


def header_not_json(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[8:12] = b"{{{{"
    path.write_bytes(bytes(raw))


def header_not_object(path: Path) -> None:
    rewrite_header(path, lambda header: [1, 2, 3])


def overlapping_offsets(path: Path) -> None:
    def change(header: dict) -> None:
        scales = [name for name in header if name.endswith("input_global_scale")]
        header[scales[1]]["data_offsets"] = header[scales[0]]["data_offsets"]

    rewrite_header(path, change)


def offsets_out_of_range(path: Path) -> None:
    def change(header: dict) -> None:
        last = max((n for n in header if n != "__metadata__"), key=lambda n: header[n]["data_offsets"][1])
        begin, end = header[last]["data_offsets"]
        header[last]["data_offsets"] = [begin + 8, end + 8]

    rewrite_header(path, change)


def byte_count_mismatch(path: Path) -> None:
    def change(header: dict) -> None:
        packed = next(n for n in header if n.endswith("weight_packed"))
        header[packed]["shape"][1] += 1

    rewrite_header(path, change)


def global_scale_with_two_values(path: Path) -> None:
    def change(header: dict) -> None:
        first, second = (n for n in header if n.endswith("_global_scale") and header[n]["data_offsets"][0] < 8)
        header[first] |= {"shape": [2], "data_offsets": [0, 8]}
        del header[second]

    rewrite_header(path, change)


def missing_shard(path: Path) -> None:
    path.unlink()


def read_only(path: Path) -> None:
    path.chmod(0o444)


CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "truncated file": (truncate, "truncated: 5 bytes, too short for the 8-byte header length"),
    "header length beyond the file": (header_length_beyond_file, "runs past the end of the file"),
    "header not JSON": (header_not_json, "header is not valid JSON"),
    "header not an object": (header_not_object, "header is a JSON list, not an object"),
    "overlapping data_offsets": (overlapping_offsets, "overlap"),
    "data_offsets out of range": (offsets_out_of_range, "do not start where the tensors before end"),
    "byte count != dtype x shape": (byte_count_mismatch, "bytes but U8 x"),
    "global scale with numel 2": (global_scale_with_two_values, "must hold one value, this one has shape [2]"),
    "shard in the index missing": (missing_shard, "named in model.safetensors.index.json but missing"),
    "read-only shard": (read_only, "is read-only"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_migrate_refuses_bad_input_and_changes_nothing(tmp_path, case):
    corrupt, problem = CASES[case]
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    victim = shards(checkpoint)[1]
    corrupt(victim)
    before = snapshot(checkpoint)

    result = run_cli_in_process("migrate", checkpoint)

    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"scalar-scales: error: {victim}")
    assert problem in line
    assert snapshot(checkpoint) == before


@pytest.mark.parametrize("case", [c for c in CASES if c != "read-only shard"])
def test_check_reports_bad_input_with_exit_2(tmp_path, case):
    corrupt, problem = CASES[case]
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    corrupt(shards(checkpoint)[1])
    result = run_cli_in_process("check", checkpoint)
    assert result.returncode == 2
    assert problem in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("env", [{}, {"SCALAR_SCALES_PORTABLE": "1"}], ids=["linux", "portable"])
def test_migrate_refuses_while_another_migrate_holds_the_lock(checkpoint, env):
    with holding_the_lock(checkpoint, env):
        before = snapshot(checkpoint)
        result = run_cli_in_process("migrate", checkpoint, env=env)
    assert result.returncode == 2
    assert result.stderr.strip() == f"scalar-scales: error: {checkpoint}: another migrate is running on this checkpoint"
    assert snapshot(checkpoint) == before


def test_a_read_only_config_is_refused_before_any_shard_changes(checkpoint):
    (checkpoint / "config.json").chmod(0o444)
    before = snapshot(checkpoint)
    result = run_cli_in_process("migrate", checkpoint)
    assert result.returncode == 2
    assert f"{checkpoint / 'config.json'}: is read-only" in result.stderr
    assert snapshot(checkpoint) == before


def test_errors_name_the_shard_even_when_it_is_the_last_of_many(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt", shards=10, experts=8)
    victim = shards(checkpoint)[-1]
    byte_count_mismatch(victim)
    result = run_cli_in_process("migrate", checkpoint)
    assert result.returncode == 2
    assert str(victim) in result.stderr
    assert os.path.exists(victim)
