"""Helpers for the command-line tests: small synthetic NVFP4 checkpoints, byte snapshots, a CLI runner."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from scalar_scales_testkit.synthetic import write_synthetic_checkpoint

__all__ = [
    "assert_migrate_refuses",
    "corrupt_header",
    "holding_the_lock",
    "data_digest",
    "edit_header_text",
    "make_checkpoint",
    "no_process_left",
    "processes_running",
    "renamed",
    "rewrite_header",
    "run_cli",
    "shards",
    "snapshot",
    "write_scales_natively_0_d",
]


def make_checkpoint(directory: Path, *, shards: int = 3, experts: int = 4, layers: int = 2) -> Path:
    """A small checkpoint shaped like the V4-Flash synthetic: legacy (1,) scales, an index, a config."""
    return write_synthetic_checkpoint(
        directory, data_bytes=layers * experts * 3 * 400, layers=layers, experts=experts, shards=shards
    )


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (links followed), by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def shards(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors"))


def data_digest(path: Path) -> str:
    """SHA-256 of the data section (everything after the header)."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    return hashlib.sha256(raw[8 + length :]).hexdigest()


def renamed(checkpoint: Path, old: str, new: str) -> None:
    """Rename every tensor whose name starts with ``old`` to start with ``new``, in its shard's header
    (JSON-escaped, as the reference reader accepts it) and in the index."""
    index = checkpoint / "model.safetensors.index.json"
    document = json.loads(index.read_text())

    def name(tensor: str) -> str:
        return new + tensor.removeprefix(old) if tensor.startswith(old) else tensor

    for shard in shards(checkpoint):
        rewrite_header(shard, lambda header: {name(tensor): entry for tensor, entry in header.items()})
    document["weight_map"] = {name(tensor): file for tensor, file in document["weight_map"].items()}
    index.write_text(json.dumps(document))


def rewrite_header(path: Path, change: Callable[[dict], object]) -> None:
    """Replace a shard's header with ``change(header)`` (compact JSON), keeping its data bytes."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    new = change(header)
    encoded = json.dumps(header if new is None else new, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + raw[8 + length :])


def write_scales_natively_0_d(checkpoint: Path) -> None:
    """Rewrite every shard's header with its global scales 0-D, compact, as a writer of 0-D scales writes them:
    (1,) then needs a longer header, so ``migrate --to legacy`` rewrites each shard to a new file."""
    for shard in shards(checkpoint):
        rewrite_header(
            shard, lambda h: {n: (s | {"shape": []} if n.endswith("_global_scale") else s) for n, s in h.items()}
        )


def edit_header_text(path: Path, change: Callable[[str], str]) -> None:
    """Replace a shard's header with ``change(text)``, as raw text (any layout, valid or not), keeping its data."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    encoded = change(raw[8 : 8 + length].decode("utf-8")).encode("utf-8")
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + raw[8 + length :])


def corrupt_header(path: Path) -> None:
    """Make a shard's header JSON that no reader parses (its second character a ``[``), keeping its length."""
    edit_header_text(path, lambda text: text[:1] + "[" + text[2:])


def processes_running(marker: str) -> list[int]:
    """Pids of live processes whose command line holds ``marker`` (zombies have an empty one)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in command:
            found.append(int(entry.name))
    return found


def no_process_left(checkpoint: Path, grace: float = 5.0) -> bool:
    """No live process (a worker, say) still works on ``checkpoint``; workers get a moment to receive their signal."""
    deadline = time.monotonic() + grace
    while processes_running(str(checkpoint)):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def run_cli(*args: str | Path, env: dict[str, str | None] | None = None) -> subprocess.CompletedProcess[str]:
    """``scalar-scales ARGS`` in a new process; ``env`` adds to (or, with None values, removes from) the environment."""
    environment = None
    if env is not None:
        environment = {key: value for key, value in {**os.environ, **env}.items() if value is not None}
    return subprocess.run(
        [sys.executable, "-m", "scalar_scales", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
    )


def assert_migrate_refuses(target: Path, watched: Path, *fragments: str) -> None:
    """``migrate target`` exits 2 with every fragment in its error, and no file under ``watched`` changes."""
    before = snapshot(watched)
    result = run_cli("migrate", target)
    assert result.returncode == 2
    assert all(fragment in result.stderr for fragment in fragments), result.stderr
    assert snapshot(watched) == before


@contextmanager
def holding_the_lock(checkpoint: Path, env: dict[str, str] | None = None) -> Iterator[None]:
    """Another process holds ``checkpoint``'s migrate lock for the block, as a running migrate does."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from scalar_scales.sources import resolve_checkpoint\n"
            "from scalar_scales.migrate import checkpoint_lock\n"
            "with checkpoint_lock(resolve_checkpoint(sys.argv[1])):\n"
            "    print('locked', flush=True)\n"
            "    time.sleep(60)\n",
            str(checkpoint),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield
    finally:
        holder.kill()
        holder.wait()
