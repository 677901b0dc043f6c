"""One test per defect reported against check and migrate, each reproduced the way it was found.

Every refusal here is exit 2, one line naming the file (and the tensor or
key), no traceback, and no byte changed anywhere under the checkpoint.
"""

from __future__ import annotations

import json
import math
import signal
import stat
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from scalar_scales.files import TEMPORARY_NAME
from scalar_scales.migration import checkpoint_lock
from scalar_scales.sources import resolve_checkpoint
from scalar_scales_testkit.cli import (
    edit_header_text,
    make_checkpoint,
    rewrite_header,
    run_cli,
    run_cli_in_process,
    shards,
    snapshot,
    until,
)
from scalar_scales_testkit.synthetic import write_synthetic_checkpoint


def assert_refused(checkpoint: Path, *fragments: str, command: tuple[str, ...] = ("migrate",)) -> None:
    before = snapshot(checkpoint)
    result = run_cli_in_process(*command, checkpoint)
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("scalar-scales: error: ") and "Traceback" not in result.stderr
    assert all(fragment in line for fragment in fragments), line
    assert snapshot(checkpoint) == before


def assert_check_and_migrate_refuse(checkpoint: Path, *fragments: str) -> None:
    assert_refused(checkpoint, *fragments, command=("check",))
    assert_refused(checkpoint, *fragments, command=("migrate",))


# A header that is not valid JSON is refused, never edited.


def test_entries_separated_by_semicolons_are_refused(checkpoint):
    victim = shards(checkpoint)[0]
    edit_header_text(victim, lambda text: text.replace(']},"', ']};"'))
    assert_check_and_migrate_refuse(checkpoint, str(victim), "header is not valid JSON")


def test_missing_commas_made_up_by_trailing_commas_are_refused_and_no_offset_changes(checkpoint):
    """The reported layout: the old fast path's matches still tiled the header, and migrate then turned
    a data_offsets ``[160,164]`` into ``[ 60,164]``."""
    victim = shards(checkpoint)[0]
    edit_header_text(victim, lambda text: text.rstrip(" ").replace(']},"', ']}"', 2)[:-1] + ",,}")
    assert_check_and_migrate_refuse(checkpoint, str(victim), "header is not valid JSON")


# What safetensors' own reader refuses is refused.


def test_trailing_bytes_after_the_data_are_refused(checkpoint):
    victim = shards(checkpoint)[1]
    with open(victim, "ab") as f:
        f.write(b"\0")
    assert_check_and_migrate_refuse(checkpoint, str(victim), "the file must end where the last tensor ends")


def test_a_gap_between_tensors_is_refused(checkpoint):
    victim = shards(checkpoint)[1]

    def gap(header: dict) -> None:
        last = max((n for n in header if n != "__metadata__"), key=lambda n: header[n]["data_offsets"][0])
        begin, end = header[last]["data_offsets"]
        header[last]["data_offsets"] = [begin + 1, end + 1]

    rewrite_header(victim, gap)
    with open(victim, "ab") as f:
        f.write(b"\0")
    assert_check_and_migrate_refuse(checkpoint, str(victim), "without gap or overlap")


def test_a_raw_tab_in_a_tensor_name_is_refused(checkpoint):
    victim = shards(checkpoint)[1]
    edit_header_text(victim, lambda text: text.replace("model.layers", "model\tlayers", 1))
    assert_check_and_migrate_refuse(checkpoint, str(victim), "header is not valid JSON")


# Malformed metadata and configs are one line and exit 2, not a traceback.


def test_a_raw_control_character_in_metadata_is_refused(checkpoint):
    victim = shards(checkpoint)[0]
    edit_header_text(victim, lambda text: text.replace('"format":"pt"', '"format":"p\x01t"'))
    assert_check_and_migrate_refuse(checkpoint, str(victim), "header is not valid JSON")


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda q: "nvfp4", "quantization_config must be an object, not a string"),
        (lambda q: q | {"config_groups": list(q["config_groups"].values())}, "must be an object of objects"),
        (lambda q: q | {"format_version": "two"}, 'format_version must be 1 or 2, not "two"'),
        (lambda q: q | {"format_version": None}, "format_version must be 1 or 2, not null"),
        (lambda q: q | {"format_version": [2]}, "format_version must be 1 or 2, not [2]"),
    ],
    ids=["quantization_config a string", "config_groups a list", "format_version two", "null", "[2]"],
)
def test_a_malformed_quantization_config_is_refused(checkpoint, change, problem):
    config_path = checkpoint / "config.json"
    config = json.loads(config_path.read_text())
    config["quantization_config"] = change(config["quantization_config"])
    config_path.write_text(json.dumps(config))
    assert_check_and_migrate_refuse(checkpoint, str(config_path), problem)


# The shards are the files the weight_map names, in the checkpoint's folder.


def test_a_file_named_only_in_the_index_metadata_is_never_touched(checkpoint):
    stranger = checkpoint / "old.safetensors"
    stranger.write_bytes(shards(checkpoint)[0].read_bytes())
    index_path = checkpoint / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["metadata"]["source"] = "old.safetensors"
    index_path.write_text(json.dumps(index, indent=2))
    before = stranger.read_bytes()
    result = run_cli_in_process("migrate", checkpoint)
    assert result.returncode == 0, result.stderr
    assert stranger.read_bytes() == before


def test_a_weight_map_entry_outside_the_folder_is_refused(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    outside = tmp_path / "outside.safetensors"
    outside.write_bytes(shards(checkpoint)[0].read_bytes())
    index_path = checkpoint / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"] = dict.fromkeys(index["weight_map"], "../outside.safetensors")
    index_path.write_text(json.dumps(index))
    assert_refused(checkpoint, str(index_path), "not a .safetensors file in this folder")
    assert outside.read_bytes() == shards(checkpoint)[0].read_bytes()


# The lock does not depend on how the checkpoint's path is spelled.


@pytest.mark.parametrize("spelling", ["a shard", "a link to the folder", "the folder with a trailing dot"])
def test_one_lock_per_checkpoint_however_it_is_named(tmp_path, spelling):
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    link = tmp_path / "link"
    link.symlink_to(checkpoint)
    target = {
        "a shard": shards(checkpoint)[0],
        "a link to the folder": link,
        "the folder with a trailing dot": checkpoint / ".",
    }[spelling]
    with checkpoint_lock(resolve_checkpoint(checkpoint)):
        before = snapshot(checkpoint)
        result = run_cli("migrate", target, "--to", "legacy")  # in its own process: this one holds the lock
    assert result.returncode == 2
    assert "another migrate is running on this checkpoint" in result.stderr
    assert snapshot(checkpoint) == before


# A full disk, and a killed run.


def in_a_full_filesystem(tmp_path: Path, script: str) -> dict:
    """Run ``script`` (Python) in a private mount namespace with a 4 MB tmpfs at ``$MNT``; return its JSON."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    command = 'mount -t tmpfs -o size=4m tmpfs "$1" && MNT="$1" exec "$2" -c "$3"'
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", command, "sh", str(mount_point), sys.executable, script],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode != 0 and "unshare" in result.stderr:
        pytest.skip(f"no private mount namespace here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


FULL_DISK_SETUP = """
import json, os, subprocess, sys
from pathlib import Path
from scalar_scales_testkit.cli import make_checkpoint
root = Path(os.environ["MNT"])
checkpoint = make_checkpoint(root / "ckpt", shards=2)
{prepare}
filler = os.open(root / "filler", os.O_WRONLY | os.O_CREAT)
try:
    while True:
        os.write(filler, bytes(4096))
except OSError:
    os.close(filler)
files = lambda: {{str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
                  and p.name != "filler"}}
before = files()
result = subprocess.run([sys.executable, "-m", "scalar_scales", "migrate", str(checkpoint), *{args}],
                        capture_output=True, text=True)
after = files()
print(json.dumps({{"code": result.returncode, "stderr": result.stderr,
                  "left": sorted(str(p.relative_to(root)) for p in root.rglob("*scalar-scales*tmp")),
                  "changed": sorted(n for n in before if before[n] != after.get(n)), "root": str(root)}}))
"""


def test_a_full_disk_with_no_room_for_config_json_is_refused_before_anything_changes(tmp_path):
    """The free space is checked before the first write (it used to fail at config.json, after every shard had
    changed)."""
    outcome = in_a_full_filesystem(tmp_path, FULL_DISK_SETUP.format(prepare="", args="[]"))
    assert outcome["code"] == 2
    (line,) = outcome["stderr"].splitlines()
    assert line.startswith(
        f"scalar-scales: error: {outcome['root']}/ckpt/config.json: cannot be written anew: the file system has "
    )
    assert outcome["left"] == []
    assert outcome["changed"] == []


def test_a_full_disk_with_no_room_for_a_rewritten_shard_names_it_and_changes_nothing(tmp_path):
    prepare = (
        "subprocess.run([sys.executable, '-m', 'scalar_scales', 'migrate', str(checkpoint)], check=True,\n"
        "               capture_output=True)\n"
        "for shard in checkpoint.glob('*.safetensors'):\n"
        "    raw = shard.read_bytes(); n = int.from_bytes(raw[:8], 'little')\n"
        "    header = raw[8:8 + n].rstrip(b' ').replace(b'[ ]', b'[]')\n"
        "    header += b' ' * (-len(header) % 8)\n"
        "    shard.write_bytes(len(header).to_bytes(8, 'little') + header + raw[8 + n:])\n"
    )
    outcome = in_a_full_filesystem(tmp_path, FULL_DISK_SETUP.format(prepare=prepare, args="['--to', 'legacy']"))
    assert outcome["code"] == 2
    (line,) = outcome["stderr"].splitlines()
    assert line.startswith(f"scalar-scales: error: {outcome['root']}/ckpt/model-0000")
    assert ": cannot be written anew: the file system has " in line
    assert outcome["left"] == []
    assert outcome["changed"] == []


def test_a_killed_rewrite_leaves_a_temporary_file_that_the_next_run_removes(tmp_path):
    """The kill is aimed at the rewrite's copy, seen from outside as its new file appearing; on a loaded machine
    the copy (300 MB in the kernel) can finish before the kill lands, so it is aimed again, up to
    :data:`KILL_TRIES` times, each from the same state: only a kill that left the new file tests anything."""
    checkpoint = tmp_path / "ckpt"
    write_synthetic_checkpoint(checkpoint, data_bytes=300_000_000, layers=1, experts=4, shards=1)
    (shard,) = shards(checkpoint)
    temporaries = lambda: [p for p in checkpoint.iterdir() if TEMPORARY_NAME.fullmatch(p.name)]  # noqa: E731
    for _ in range(KILL_TRIES):
        assert run_cli_in_process("migrate", checkpoint).returncode == 0
        edit_header_text(shard, lambda text: (text.rstrip(" ").replace("[ ]", "[]") + " " * 8)[: len(text)])
        process = subprocess.Popen(
            [sys.executable, "-m", "scalar_scales", "migrate", str(checkpoint), "--to", "legacy"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        until(lambda: bool(temporaries()), process)  # the rewrite's new file appears: kill it while it is written
        process.send_signal(signal.SIGKILL)
        process.wait()
        if temporaries():
            break
    assert temporaries(), f"the rewrite finished before the kill {KILL_TRIES} times; nothing was tested"
    result = run_cli_in_process("migrate", checkpoint, "--to", "legacy")
    assert result.returncode == 0, result.stderr
    assert not temporaries()


KILL_TRIES = 5


# config.json is kept as it was, but for the marker.


def test_config_json_keeps_its_mode_key_order_and_layout_and_comes_back_byte_for_byte(checkpoint):
    config_path = checkpoint / "config.json"
    config = json.loads(config_path.read_text())
    config["quantization_config"].pop("format_version", None)
    text = json.dumps({"z_first": 1, **config, "a_last": [1, 2]}, indent="\t").replace("\n", "\r\n")
    config_path.write_text(text, newline="")
    config_path.chmod(0o600)
    original = config_path.read_bytes()

    assert run_cli_in_process("migrate", checkpoint).returncode == 0
    migrated = config_path.read_bytes()
    assert stat.S_IMODE(config_path.stat().st_mode) == 0o600
    assert json.loads(migrated)["quantization_config"]["format_version"] == 2
    assert migrated.replace(b',\r\n\t\t"format_version": 2', b"") == original

    assert run_cli_in_process("migrate", checkpoint, "--to", "legacy").returncode == 0
    assert config_path.read_bytes() == original
    assert stat.S_IMODE(config_path.stat().st_mode) == 0o600


# check --json is strict JSON.


def test_check_json_is_strict_json_with_non_finite_values_as_strings(checkpoint):
    shard = shards(checkpoint)[0]
    raw = bytearray(shard.read_bytes())
    (length,) = struct.unpack("<Q", raw[:8])
    for index, value in enumerate((math.nan, math.inf, -math.inf)):
        raw[8 + length + 4 * index : 8 + length + 4 * index + 4] = struct.pack("<f", value)
    shard.write_bytes(bytes(raw))

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    result = run_cli_in_process("check", checkpoint, "--json", "--list")
    document = json.loads(result.stdout, parse_constant=refuse)
    values = [scale["value"] for scale in document["scales"] if scale["file"] == str(shard)][:3]
    assert values == ["NaN", "Infinity", "-Infinity"]


# An index and shards that disagree.


def assert_migrate_refuses_and_check_reports_it(
    checkpoint: Path, shard: Path, tensor: str, problem: str, code: str
) -> None:
    """An index that disagrees with its shards is a check finding (NV501, NV502), and a migrate refusal."""
    assert_refused(checkpoint, str(shard), tensor, problem)
    before = snapshot(checkpoint)
    result = run_cli_in_process("check", checkpoint, "--json", "--select", code, "--strict")
    assert result.returncode == 1
    [finding] = json.loads(result.stdout)["findings"]
    assert (finding["code"], finding["file"], finding["tensor"]) == (code, str(shard), tensor)
    assert problem in finding["message"]
    assert snapshot(checkpoint) == before


def test_a_tensor_in_the_index_but_not_in_its_shard_is_refused_by_migrate_and_reported_by_check(checkpoint):
    index_path = checkpoint / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"]["model.layers.9.mlp.experts.9.up_proj.weight_scale"] = shards(checkpoint)[0].name
    index_path.write_text(json.dumps(index))
    assert_migrate_refuses_and_check_reports_it(
        checkpoint, shards(checkpoint)[0], "model.layers.9.mlp.experts.9.up_proj.weight_scale", "not in it", "NV501"
    )


def test_a_tensor_in_a_shard_but_not_in_the_index_is_refused_by_migrate_and_reported_by_check(checkpoint):
    index_path = checkpoint / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    name = next(n for n, f in index["weight_map"].items() if f == shards(checkpoint)[1].name)
    del index["weight_map"][name]
    index_path.write_text(json.dumps(index))
    assert_migrate_refuses_and_check_reports_it(
        checkpoint, shards(checkpoint)[1], name, "not in model.safetensors.index.json", "NV502"
    )
