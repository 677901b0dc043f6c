"""migrate and check against the full-rewrite workaround, on a synthetic V4-Flash-shaped checkpoint.

For each data size, in one run:

- writes a synthetic checkpoint: 43 layers x 256 experts x 3 projections,
  66,048 (1,) global scales in 46 shards, plus a packed weight and an FP8
  group scale per projection (the realistic header size);
- times ``migrate_checkpoint`` in-process (to 0-D, then back to (1,) to reset,
  repeated) and ``scalar-scales migrate`` as a whole command;
- times ``check`` in-process (every header read and validated, every scale
  value read);
- on a copy, times the documented workaround: load every shard, squeeze
  the scales, save to ``.tmp``, rename (safetensors + torch).

    OMP_NUM_THREADS=1 python benchmarks/migrate.py --sizes 0.4 4

Targets (2-core machine): migrate <= 0.3 s in-process and <= 1 s as a command;
check <= 0.15 s; migrate flat in data size; >= 25x faster than the full
rewrite at 4 GB. The data is in the page cache after it is written, which
favours the full rewrite (no disk reads); migrate never reads data.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scalar_scales.migrate import migrate_checkpoint
from scalar_scales.scan import scan_checkpoint
from scalar_scales_testkit.synthetic import write_synthetic_checkpoint

TARGETS = {"migrate_in_process": 0.3, "migrate_command": 1.0, "check": 0.15, "speedup_at_4gb": 25.0}


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def full_rewrite(checkpoint: Path) -> None:
    """The workaround from the upstream report: rewrite every shard with squeezed scales."""
    from safetensors.torch import load_file, save_file

    for shard in sorted(checkpoint.glob("*.safetensors")):
        tensors = load_file(shard)
        for name, tensor in tensors.items():
            if name.endswith("_global_scale"):
                tensors[name] = tensor.reshape(())
        tmp = shard.with_suffix(".tmp")
        save_file(tensors, tmp, metadata={"format": "pt"})
        os.replace(tmp, shard)


def check(checkpoint: Path) -> None:
    scan = scan_checkpoint(checkpoint)
    assert scan.scale_count == 66_048
    scan.legacy_count, scan.suspicious_count, scan.marker_mismatch  # noqa: B018


def measure(root: Path, gigabytes: float, repeats: int) -> dict[str, float]:
    checkpoint = write_synthetic_checkpoint(root / f"v4-{gigabytes}gb", data_bytes=int(gigabytes * 1e9))
    os.sync()  # otherwise migrate's first fsync pays for flushing the generator's data
    migrate_seconds, legacy_seconds = [], []
    for _ in range(repeats):
        migrate_seconds.append(timed(lambda: migrate_checkpoint(checkpoint)))
        legacy_seconds.append(timed(lambda: migrate_checkpoint(checkpoint, to="legacy")))
    command = [sys.executable, "-m", "scalar_scales", "migrate", str(checkpoint)]
    command_seconds = []
    for _ in range(repeats):
        command_seconds.append(timed(lambda: subprocess.run(command, check=True, capture_output=True)))
        migrate_checkpoint(checkpoint, to="legacy")
    check_seconds = [timed(lambda: check(checkpoint)) for _ in range(repeats)]

    copy = root / f"copy-{gigabytes}gb"
    shutil.copytree(checkpoint, copy)
    rewrite_seconds = timed(lambda: full_rewrite(copy))
    shutil.rmtree(copy)
    shutil.rmtree(checkpoint)
    return {
        "migrate_in_process": statistics.median(migrate_seconds),
        "migrate_to_legacy_in_process": statistics.median(legacy_seconds),
        "migrate_command": statistics.median(command_seconds),
        "check": statistics.median(check_seconds),
        "full_rewrite": rewrite_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.4, 4.0], help="data sizes in GB")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workdir", help="where to write the checkpoints (default: a temporary folder)")
    args = parser.parse_args()
    root = Path(args.workdir or tempfile.mkdtemp(prefix="scalar-scales-migrate-bench-"))
    root.mkdir(parents=True, exist_ok=True)

    results = {size: measure(root, size, args.repeats) for size in args.sizes}
    print("synthetic V4-Flash: 66,048 global scales, 46 shards; medians of", args.repeats, "runs (seconds)")
    print(f"{'data':>6}  {'migrate':>8}  {'command':>8}  {'check':>7}  {'rewrite':>8}  {'speedup':>8}")
    for size, r in results.items():
        speedup = r["full_rewrite"] / r["migrate_in_process"]
        print(
            f"{size:>5}G  {r['migrate_in_process']:>8.3f}  {r['migrate_command']:>8.3f}  {r['check']:>7.3f}  "
            f"{r['full_rewrite']:>8.2f}  {speedup:>7.0f}x"
        )
    smallest, largest = results[min(results)], results[max(results)]
    flat = largest["migrate_in_process"] / smallest["migrate_in_process"]
    print(f"migrate time, largest/smallest data size: {flat:.2f}")
    print("targets:", ", ".join(f"{k} {v}" for k, v in TARGETS.items()))


if __name__ == "__main__":
    main()
