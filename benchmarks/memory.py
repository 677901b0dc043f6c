"""Peak memory of ``scalar-scales check`` and ``migrate`` on one shard whose header holds 780,000 global scales
(96 MB), locally and over ``hf://`` (the test kit's Hub stand-in on 127.0.0.1), against the header's size: what
docs/check.md and docs/migrate.md state as the bound.

Each command runs in a new process; its peak resident set comes from the kernel (``wait4``'s ``ru_maxrss``).
``hf://`` needs huggingface_hub (the serving environment). ``--shards N`` serves N such shards, so that the
reader threads fetch several large headers at once.

Measured (2026-12-02, 2 cores, Python 3.11): 780,000 scales, one 97.9 MB header: check 938 MB (9.6x the header),
migrate 1,133 MB (11.6x), check hf:// 1,050 MB (10.7x); four shards of 200,000 (24.7 MB each): 879, 880 and
1,213 MB (8.9x, 8.9x, 12.3x the headers together). Memory grows with the headers read, about ten times their
size: every header's columns are kept for the rules, and parsing one takes several times its bytes. A lock
that parsed one header at a time over hf:// was measured and did not pay (1,203 MB without it, four shards):
``json.loads`` holds the GIL, so the reader threads already parse one at a time; there is none.

    OMP_NUM_THREADS=1 python benchmarks/memory.py [--scales 780000] [--shards 1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from scalar_scales_testkit.hub_server import HubRepository, client_environment, serve_hub


def write_shard(path: Path, scales: int, layer: int = 0) -> int:
    """A compact safetensors file of ``scales`` (1,) F32 global scales; its header's length."""
    names = [
        f"model.layers.{layer}.{i // 1536}.mlp.experts.{i // 6 % 256}.{('gate', 'up', 'down')[i // 2 % 3]}_proj."
        f"{('weight', 'input')[i % 2]}_global_scale"
        for i in range(scales)
    ]
    header = {name: {"dtype": "F32", "shape": [1], "data_offsets": [4 * k, 4 * k + 4]} for k, name in enumerate(names)}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + struct.pack("<f", 448.0) * scales)
    return len(raw)


def checkpoint(folder: Path, scales: int, shards: int) -> int:
    """``shards`` such shards and their index; the largest header's length."""
    folder.mkdir(parents=True)
    lengths, weight_map = [], {}
    for shard in range(shards):
        name = f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
        lengths.append(write_shard(folder / name, scales, shard))
        raw = (folder / name).read_bytes()
        (length,) = struct.unpack("<Q", raw[:8])
        weight_map |= dict.fromkeys(json.loads(raw[8 : 8 + length]), name)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return max(lengths)


def peak_mb(argv: list[str], env: dict[str, str] | None = None) -> float:
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    assert os.waitstatus_to_exitcode(status) in (0, 1), process.stderr.read() if process.stderr else status
    return usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", type=int, default=780_000)
    parser.add_argument("--shards", type=int, default=1)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="scalar-scales-memory-bench-"))
    command = [sys.executable, "-m", "scalar_scales"]
    try:
        folder = root / "ckpt"
        header = checkpoint(folder, args.scales, args.shards) / 1e6
        rows = [("check", peak_mb([*command, "check", "--statistics", str(folder)]))]
        migrated = root / "migrated"
        shutil.copytree(folder, migrated)
        rows.append(("migrate", peak_mb([*command, "migrate", str(migrated)])))
        with serve_hub({"org/model": HubRepository({"main": folder})}) as (endpoint, _):
            env = {**os.environ, **client_environment(endpoint, root)}
            env = {key: value for key, value in env.items() if value is not None}
            rows.append(("check hf://", peak_mb([*command, "check", "--statistics", "hf://org/model"], env)))
        print(f"{args.shards} shard(s) of {args.scales} global scales, each header {header:.1f} MB")
        print(f"{'command':<12} {'peak MB':>8} {'x header':>9}")
        for name, peak in rows:
            print(f"{name:<12} {peak:>8.0f} {peak / (header * args.shards):>8.1f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
