"""migrate and check against the fastest honest full rewrite, on a synthetic V4-Flash-shaped checkpoint.

For each data size, in one run:

- writes a synthetic checkpoint: 43 layers x 256 experts x 3 projections,
  66,048 (1,) global scales in 46 shards, plus a packed weight and an FP8
  group scale per projection (the realistic header size);
- times ``scalar-scales migrate`` and ``scalar-scales check`` as whole
  commands (to 0-D; reset to (1,) in-process between runs), and
  ``migrate_checkpoint`` in-process;
- on a copy, times the fastest full rewrite a user has without this tool:
  the ``safetensors`` library without torch, shard by shard (read,
  ``deserialize``, every global scale's shape set to ``[]``,
  ``serialize_file`` to a temporary file, fsync, rename).

    OMP_NUM_THREADS=1 python benchmarks/migrate.py --sizes 0.4 3.8

Targets (2-core machine): migrate <= 0.5 s as a command, flat in data size;
check <= 0.35 s as a command. The data is in the page cache after it is
written, which favours the full rewrite (no disk reads); migrate never
reads data.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scalar_scales.checkpoint import is_global_scale
from scalar_scales.migrate import migrate_checkpoint
from scalar_scales_testkit.synthetic import write_synthetic_checkpoint

TARGETS = {"migrate_command": 0.5, "check_command": 0.35}


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


SPEC_DTYPES = {"F32": "float32", "U8": "uint8", "F8_E4M3": "float8_e4m3fn"}
"""The synthetic checkpoint's dtypes, as ``safetensors.TensorSpec`` names them."""


def full_rewrite(checkpoint: Path) -> None:
    """The workaround from the upstream report, as fast as it gets: safetensors' own reader and writer, no torch."""
    from safetensors import TensorSpec, deserialize, serialize_file

    for shard in sorted(checkpoint.glob("*.safetensors")):
        tensors = deserialize(shard.read_bytes())
        buffers = [(ctypes.c_char * len(t["data"])).from_buffer(t["data"]) for _, t in tensors]
        specs = {
            name: TensorSpec(
                dtype=SPEC_DTYPES[t["dtype"]],
                shape=[] if is_global_scale(name) else t["shape"],
                data_ptr=ctypes.addressof(buffer),
                data_len=len(t["data"]),
            )
            for (name, t), buffer in zip(tensors, buffers, strict=True)
        }
        tmp = shard.with_name(f".{shard.name}.rewrite.tmp")
        serialize_file(specs, str(tmp), metadata={"format": "pt"})
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, shard)
    fd = os.open(checkpoint, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def command(*args: str | Path) -> None:
    subprocess.run([sys.executable, "-m", "scalar_scales", *map(str, args)], check=True, capture_output=True)


def measure(root: Path, gigabytes: float, repeats: int) -> dict[str, float]:
    checkpoint = write_synthetic_checkpoint(root / f"v4-{gigabytes}gb", data_bytes=int(gigabytes * 1e9))
    os.sync()  # otherwise migrate's first fsync pays for flushing the generator's data
    in_process, commands, checks = [], [], []
    for _ in range(repeats):
        in_process.append(timed(lambda: migrate_checkpoint(checkpoint)))
        migrate_checkpoint(checkpoint, to="legacy")
        commands.append(timed(lambda: command("migrate", checkpoint)))
        checks.append(timed(lambda: command("check", checkpoint, "--quiet")))
        migrate_checkpoint(checkpoint, to="legacy")

    copy = root / f"copy-{gigabytes}gb"
    shutil.copytree(checkpoint, copy)
    os.sync()
    rewrite_seconds = timed(lambda: full_rewrite(copy))
    shutil.rmtree(copy)
    shutil.rmtree(checkpoint)
    return {
        "migrate_in_process": statistics.median(in_process),
        "migrate_command": statistics.median(commands),
        "check_command": statistics.median(checks),
        "full_rewrite": rewrite_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.4, 3.8], help="data sizes in GB")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workdir", help="where to write the checkpoints (default: a temporary folder)")
    args = parser.parse_args()
    root = Path(args.workdir or tempfile.mkdtemp(prefix="scalar-scales-migrate-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        results = {size: measure(root, size, args.repeats) for size in args.sizes}
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    print("synthetic V4-Flash: 66,048 global scales, 46 shards; medians of", args.repeats, "runs (seconds)")
    print(f"{'data':>6}  {'migrate':>8}  {'command':>8}  {'check':>7}  {'rewrite':>8}  {'rewrite/command':>15}")
    for size, r in results.items():
        ratio = r["full_rewrite"] / r["migrate_command"]
        print(
            f"{size:>5}G  {r['migrate_in_process']:>8.3f}  {r['migrate_command']:>8.3f}  {r['check_command']:>7.3f}  "
            f"{r['full_rewrite']:>8.2f}  {ratio:>14.1f}x"
        )
    smallest, largest = results[min(results)], results[max(results)]
    flat = largest["migrate_command"] / smallest["migrate_command"]
    print(f"migrate command time, largest/smallest data size: {flat:.2f}")
    print("targets (seconds):", ", ".join(f"{k} <= {v}" for k, v in TARGETS.items()))


if __name__ == "__main__":
    main()
