"""migrate and check against the fastest honest alternatives, on a synthetic V4-Flash-shaped checkpoint.

For each data size, in one run:

- writes a synthetic checkpoint: 43 layers x 256 experts x 3 projections,
  66,048 (1,) global scales in 46 shards, plus a packed weight and an FP8
  group scale per projection (the realistic header size);
- times ``scalar-scales migrate`` and ``scalar-scales check`` (every
  rule) as whole commands: migrate to 0-D, check on the clean result and on
  the legacy checkpoint (66,048 NV101 findings), reset to (1,) in-process
  between runs; and ``migrate_checkpoint`` in-process;
- times, in-process, what ``check`` reads done with the ``safetensors``
  library: every shard opened with ``safe_open``, every tensor's dtype and
  shape, every global scale's value (no rule applied: a lower bound);
- times ``scalar-scales check hf://...`` against the test kit's local Hub
  server on 127.0.0.1 serving the checkpoint, and the share of its bytes
  fetched;
- on a copy, times the fastest full rewrite a user has without this tool:
  the ``safetensors`` library without torch, shard by shard (read,
  ``deserialize``, every global scale's shape set to ``[]``,
  ``serialize_file`` to a temporary file, fsync, rename).

    OMP_NUM_THREADS=1 python benchmarks/migrate.py --sizes 0.4 3.8 [--baseline TREE]

``--baseline TREE`` also times, alternately with this tree's, the same
commands run from another checkout of this project (an earlier commit, from
``git worktree add TREE REV``), and prints this tree's time over TREE's.

Targets (2-core machine): migrate <= 0.5 s as a command, flat in data size;
check (all rules) <= 0.5 s as a command; an hf:// check fetches < 1% of the
bytes of the largest checkpoint. The data is in the page cache after it is
written, which favours the full rewrite (no disk reads); migrate never
reads data.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from scalar_scales.doctor import diagnose
from scalar_scales.migration import migrate_checkpoint
from scalar_scales.nvfp4 import is_global_scale
from scalar_scales.sources import open_local
from scalar_scales_testkit.cli import run_cli
from scalar_scales_testkit.hub_server import HubRepository, client_environment, serve_hub
from scalar_scales_testkit.synthetic import write_synthetic_checkpoint

TARGETS = {"migrate_command": 0.5, "check_command": 0.5, "check_legacy_command": 0.5}


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


def safetensors_read(checkpoint: Path) -> None:
    """What check reads, read with safetensors' own reader: every dtype and shape, every global scale's value."""
    from safetensors import safe_open

    for shard in sorted(checkpoint.glob("*.safetensors")):
        with safe_open(shard, framework="numpy") as f:
            for name in f.keys():
                tensor = f.get_slice(name)
                tensor.get_dtype(), tensor.get_shape()
                if is_global_scale(name):
                    f.get_tensor(name)


def command(*args: str | Path, env: dict[str, str | None] | None = None) -> None:
    """Run the command (the test kit's ``run_cli``); it must work (exit 0, or 1 for a check with findings)."""
    result = run_cli(*args, env=env)
    assert result.returncode in (0, 1), result.stderr


def remote_check(checkpoint: Path, root: Path, repeats: int) -> tuple[float, float]:
    """Median seconds of ``check hf://`` against a local Hub server, and the percentage of bytes fetched."""
    with serve_hub({"bench/v4": HubRepository({"main": checkpoint})}) as (endpoint, served):
        env = client_environment(endpoint, root)
        seconds = statistics.median(timed(lambda: command("check", "hf://bench/v4", env=env)) for _ in range(repeats))
        fetched = served.file_bytes / repeats
    return seconds, 100 * fetched / sum(p.stat().st_size for p in checkpoint.iterdir())


BASELINED = ("check_legacy_command", "migrate_command", "check_command")
"""The commands ``--baseline`` times from both trees."""


def measure(root: Path, gigabytes: float, repeats: int, baseline: Path | None = None) -> dict[str, float]:
    checkpoint = write_synthetic_checkpoint(root / f"v4-{gigabytes}gb", data_bytes=int(gigabytes * 1e9))
    os.sync()  # otherwise migrate's first fsync pays for flushing the generator's data
    in_process, commands, checks, legacy_checks, check_in_process, reads = [], [], [], [], [], []
    before: dict[str, list[float]] = {key: [] for key in BASELINED}
    env = {"PYTHONPATH": str(baseline), "PYTHONSAFEPATH": "1"}  # else `-m` puts the working folder first
    for _ in range(repeats):
        in_process.append(timed(lambda: migrate_checkpoint(checkpoint)))
        migrate_checkpoint(checkpoint, to="legacy")
        if baseline is not None:
            before["check_legacy_command"].append(timed(lambda: command("check", checkpoint, "--statistics", env=env)))
            before["migrate_command"].append(timed(lambda: command("migrate", checkpoint, env=env)))
            before["check_command"].append(timed(lambda: command("check", checkpoint, "--statistics", env=env)))
            migrate_checkpoint(checkpoint, to="legacy")
        legacy_checks.append(timed(lambda: command("check", checkpoint, "--statistics")))
        commands.append(timed(lambda: command("migrate", checkpoint)))
        checks.append(timed(lambda: command("check", checkpoint, "--statistics")))
        check_in_process.append(timed(lambda: diagnose(open_local(checkpoint)).findings))
        reads.append(timed(lambda: safetensors_read(checkpoint)))
        migrate_checkpoint(checkpoint, to="legacy")
    remote_seconds, remote_share = remote_check(checkpoint, root, repeats)

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
        "check_legacy_command": statistics.median(legacy_checks),
        "check_in_process": statistics.median(check_in_process),
        "safetensors_read": statistics.median(reads),
        "check_remote_command": remote_seconds,
        "remote_fetched_percent": remote_share,
        "full_rewrite": rewrite_seconds,
        **{f"baseline_{key}": statistics.median(times) for key, times in before.items() if times},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.4, 3.8], help="data sizes in GB")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workdir", help="where to write the checkpoints (default: a temporary folder)")
    parser.add_argument("--baseline", type=Path, help="another checkout of this project, timed alternately")
    args = parser.parse_args()
    root = Path(args.workdir or tempfile.mkdtemp(prefix="scalar-scales-migrate-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        results = {size: measure(root, size, args.repeats, args.baseline) for size in args.sizes}
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    print("synthetic V4-Flash: 66,048 global scales, 46 shards; medians of", args.repeats, "runs (seconds)")
    print(f"{'data':>6}  {'migrate':>8}  {'command':>8}  {'rewrite':>8}  {'rewrite/command':>15}")
    for size, r in results.items():
        ratio = r["full_rewrite"] / r["migrate_command"]
        print(
            f"{size:>5}G  {r['migrate_in_process']:>8.3f}  {r['migrate_command']:>8.3f}  "
            f"{r['full_rewrite']:>8.2f}  {ratio:>14.1f}x"
        )
    print("check (all rules): command on the clean and the legacy checkpoint; in-process on the clean one, against")
    print("safetensors' reader reading the same (no rule applied); hf:// against a local server")
    print(
        f"{'data':>6}  {'command':>7}  {'legacy':>7}  {'in-proc':>7}  {'safetensors':>11}  {'read/check':>10}  "
        f"{'hf://':>6}  {'fetched':>8}"
    )
    for size, r in results.items():
        print(
            f"{size:>5}G  {r['check_command']:>7.3f}  {r['check_legacy_command']:>7.3f}  {r['check_in_process']:>7.3f}"
            f"  {r['safetensors_read']:>11.3f}  {r['safetensors_read'] / r['check_in_process']:>9.2f}x"
            f"  {r['check_remote_command']:>6.3f}  {r['remote_fetched_percent']:>7.3f}%"
        )
    smallest, largest = results[min(results)], results[max(results)]
    flat = largest["migrate_command"] / smallest["migrate_command"]
    print(f"migrate command time, largest/smallest data size: {flat:.2f}")
    print("targets (seconds):", ", ".join(f"{k} <= {v}" for k, v in TARGETS.items()))
    if args.baseline is not None:
        print(f"this tree / {args.baseline} (medians, run alternately; below 1 is faster)")
        print(f"{'data':>6}  " + "  ".join(f"{key:>20}" for key in BASELINED))
        for size, r in results.items():
            ratios = "  ".join(f"{r[key] / r[f'baseline_{key}']:>20.3f}" for key in BASELINED)
            print(f"{size:>5}G  {ratios}")


if __name__ == "__main__":
    main()
