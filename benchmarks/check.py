"""``scalar-scales check`` against the two reference passes of its speed target, side by side in one run.

The references (``REFERENCES``), each a whole command in a new process, as
``check`` is:

- ``user_script.py``: what a user writes instead of installing the tool,
  the reference ``safetensors.safe_open`` with numpy, every shard's global
  scales, shape and value (it needs ``safetensors`` and ``numpy``);
- ``floor_sharded.py``: the floor, reading the index, then each shard's
  header and scale values with ``json`` and ``struct``, one shard after
  another, with no validation: nothing that reads every value can be much
  faster in Python.

Both are read from ``../shared/bench/``, the folder beside this checkout
where the issue puts them (``--references`` names another), not copied: the
targets are ratios to those files as they are, which a copy here would have
to be kept in step with. Where one is missing the benchmark ends at once,
naming it.

The targets, on the V4-Flash-shaped checkpoint (``legacy``: 43 layers x 256
experts x 3 projections in 46 shards, 66,048 (1,) global scales, the data
sparse holes, otherwise consistent, so its only finding is NV101): every
rule together, at most 1.0x ``user_script.py`` and at most 1.5x
``floor_sharded.py`` (1.0x the moonshot). ``many-findings`` is the same with
every global scale also in the other convention (NV302, 132,096 findings);
``spaced-200k`` one shard of 200,000 (1,) global scales whose header is
written with spaces and newlines (``json.dumps(..., indent=1)``), with the
index the floor reads.

``check`` runs with every rule, as ``--statistics`` (the counts and the summary line) and as
text (the default output), each alternating with each reference: the
commands of one repeat run in the order check, user_script, check, floor
(``--statistics``, then text), and each ratio is the median, over the repeats,
of a check run over the reference run just after it (a pair shares the
machine's state of the moment, which on a shared machine drifts by more than
the difference measured), of wall times and, in brackets, of CPU times
(user and system), which other load on a shared machine disturbs less. The
package is byte-compiled first, as an installed wheel is, so that no run
compiles it (the test command sets ``PYTHONDONTWRITEBYTECODE``).
benchmarks/check.md holds the figures measured.

    OMP_NUM_THREADS=1 python benchmarks/check.py [--repeats 7] [--checkpoint DIR] [--references DIR]
        [--rules all|NV101,...]
"""

from __future__ import annotations

import argparse
import compileall
import json
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import scalar_scales
from scalar_scales.doctor import RULES
from scalar_scales.migration import migrate_checkpoint
from scalar_scales.nvfp4 import COMPRESSED_TENSORS_LAYOUT
from scalar_scales_testkit.broken import CORPUS
from scalar_scales_testkit.synthetic import write_synthetic_checkpoint

REFERENCES_FOLDER = Path(__file__).resolve().parents[2] / "shared" / "bench"
"""``../shared/bench`` beside this checkout: the issue's reference passes."""
REFERENCES = ("user_script.py", "floor_sharded.py")

TARGETS = {"user_script.py": 1.0, "floor_sharded.py": 1.5}
"""The most ``check`` may take on the V4-Flash-shaped checkpoint, as a multiple of each reference."""


def references(folder: Path) -> dict[str, Path]:
    """Each reference pass in ``folder``; a missing one ends the benchmark, naming it."""
    found = {name: folder / name for name in REFERENCES}
    for path in found.values():
        if not path.is_file():
            sys.exit(f"benchmarks/check.py: error: {path}: no such file (--references names their folder)")
    return found


def timed(argv: list[str]) -> tuple[float, float]:
    """The command's wall time and its CPU time (user and system, its own and its children's), in seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert result.returncode in (0, 1), result.stderr
    return elapsed, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def spaced_shard(folder: Path, scales: int = 200_000) -> Path:
    """A one-shard checkpoint of ``scales`` (1,) F32 global scales, its header written with spaces and newlines,
    and the index that lists them."""
    folder.mkdir(parents=True)
    names = [
        f"model.layers.{i // 1536}.mlp.experts.{i // 6 % 256}.{('gate', 'up', 'down')[i // 2 % 3]}_proj."
        f"{('weight', 'input')[i % 2]}_global_scale"
        for i in range(scales)
    ]
    header = {name: {"dtype": "F32", "shape": [1], "data_offsets": [4 * k, 4 * k + 4]} for k, name in enumerate(names)}
    raw = json.dumps(header, indent=1).encode()
    raw += b" " * (-len(raw) % 8)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + struct.pack("<f", 448.0) * scales)
    index = {"metadata": {}, "weight_map": dict.fromkeys(names, "model.safetensors")}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return folder


def checkpoints(root: Path, legacy: Path | None) -> dict[str, Path]:
    legacy = legacy or write_synthetic_checkpoint(root / "legacy", data_bytes=400_000_000, sparse=True)
    many = root / "many-findings"
    shutil.copytree(legacy, many)
    migrate_checkpoint(many)
    CORPUS["reciprocal-convention"].make(many, COMPRESSED_TENSORS_LAYOUT)
    migrate_checkpoint(many, to="legacy")
    return {"legacy": legacy, "many-findings": many, "spaced-200k": spaced_shard(root / "spaced-200k")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--checkpoint", type=Path, help="the V4-Flash-shaped checkpoint, already written (by default written here)"
    )
    parser.add_argument("--references", type=Path, default=REFERENCES_FOLDER, help="the reference passes' folder")
    parser.add_argument("--rules", default="", help="also time these rules alone: 'all', or comma-separated codes")
    args = parser.parse_args()
    alone = list(RULES) if args.rules == "all" else [code for code in args.rules.split(",") if code]
    compileall.compile_dir(Path(scalar_scales.__file__).parent, quiet=1)
    scripts = references(args.references)
    root = Path(tempfile.mkdtemp(prefix="scalar-scales-check-bench-"))
    try:
        made = checkpoints(root, args.checkpoint)
        print(f"medians of {args.repeats} runs, wall seconds; x REFERENCE: the median of the ratios of each check")
        print("run over the reference run just after it, of wall times (and, in brackets, of CPU times)")
        print(
            f"{'checkpoint':<14} {'check':<18} {'check':>7} {'user':>7} {'floor':>7} {'x user_script':>16} "
            f"{'x floor_sharded':>16}"
        )
        verdicts = []
        for label, checkpoint in made.items():
            reference = {name: [sys.executable, str(script), str(checkpoint)] for name, script in scripts.items()}
            outputs = [("--statistics", ["--statistics"]), ("text", [])]
            outputs += [(f"--statistics --select {code}", ["--statistics", "--select", code]) for code in alone]
            for shown, options in outputs:
                check = [sys.executable, "-m", "scalar_scales", "check", str(checkpoint), *options]
                runs: dict[str, list[float]] = {"check": [], "user_script.py": [], "floor_sharded.py": []}
                ratios: dict[str, list[float]] = {"user_script.py": [], "floor_sharded.py": []}
                cpu_ratios: dict[str, list[float]] = {"user_script.py": [], "floor_sharded.py": []}
                for _ in range(args.repeats):
                    for name in ratios:
                        (check_wall, check_cpu), (wall, cpu) = timed(check), timed(reference[name])
                        runs["check"].append(check_wall)
                        runs[name].append(wall)
                        ratios[name].append(check_wall / wall)
                        cpu_ratios[name].append(check_cpu / cpu)
                medians = {name: statistics.median(times) for name, times in runs.items()}
                over = {
                    name: f"{statistics.median(ratios[name]):.2f}x ({statistics.median(cpu_ratios[name]):.2f}x)"
                    for name in ratios
                }
                print(
                    f"{label:<14} {shown:<18} {medians['check']:>7.3f} {medians['user_script.py']:>7.3f} "
                    f"{medians['floor_sharded.py']:>7.3f} {over['user_script.py']:>16} {over['floor_sharded.py']:>16}"
                )
                if label == "legacy" and shown in ("--statistics", "text"):
                    verdicts += [
                        f"legacy, check {shown}: {over[name]} {name} (target: at most {target:.1f}x)"
                        for name, target in TARGETS.items()
                    ]
        print("\n".join(verdicts))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
