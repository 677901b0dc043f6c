"""``scalar-scales check`` against the floor (the plainest pass that reads the same scales) and against the short
script a user writes with the ``safetensors`` library, side by side in one run.

The checkpoints:

- ``legacy``: the synthetic V4-Flash-shaped checkpoint (43 layers x 256
  experts x 3 projections, 46 shards, data as sparse holes: check reads
  headers and scales only), 66,048 (1,) global scales, otherwise
  consistent, so its only finding is NV101 (66,048 findings);
- ``many-findings``: the same, every global scale also stored in the other
  convention (NV302), 132,096 findings;
- ``spaced-200k``: one shard with 200,000 (1,) global scales whose header is
  written with spaces and newlines (``json.dumps(..., indent=1)``), as
  writers other than the reference one write it.

The floor (``FLOOR``) is a plain sequential pass with no validation: per
shard, ``json.loads`` of the header, and every global scale's shape and
value through ``struct``. ``+index`` (``FLOOR_WITH_INDEX``) is the floor
that also reads the index, as check must to know the shards and hold the
index to them: on the V4-Flash-shaped checkpoint its ``json.loads`` alone
is about a third of the floor, so 1.3x the floor leaves check almost
nothing for validation and rules. The script (``SCRIPT``) is what a user writes:
``safe_open`` with numpy, every global scale's shape and value. All run as
whole commands, in new processes, alternately, each ``--repeats`` times; the
table gives their medians and the median of check's time over the floor's
(and the script's) run just after it (a pair shares the machine's state of
the moment, which on a shared machine drifts by more than the difference
measured). The targets: every rule together at most 1.3x the floor on the
V4-Flash-shaped checkpoints, and at most 2.0x on the spaced shard.

The package is byte-compiled first, as an installed wheel is, so that no run
compiles it (the test command sets ``PYTHONDONTWRITEBYTECODE``).

    OMP_NUM_THREADS=1 python benchmarks/check.py [--repeats 11] [--rules all|NV101,...]
"""

from __future__ import annotations

import argparse
import compileall
import json
import operator
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
from scalar_scales.migrate import migrate_checkpoint
from scalar_scales.nvfp4 import COMPRESSED_TENSORS_LAYOUT
from scalar_scales_testkit.broken import CORPUS
from scalar_scales_testkit.synthetic import write_synthetic_checkpoint

FLOOR = """
import json, struct, sys
from pathlib import Path

found = 0
for shard in sorted(Path(sys.argv[1]).glob("*.safetensors")):
    with open(shard, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        start = 8 + length
        for name, entry in header.items():
            if name.endswith("_global_scale"):
                f.seek(start + entry["data_offsets"][0])
                (value,) = struct.unpack("<f", f.read(4))
                if entry["shape"] != [] or not 0 < value < float("inf"):
                    found += 1
print(found)
"""

FLOOR_WITH_INDEX = FLOOR.replace(
    'for shard in sorted(Path(sys.argv[1]).glob("*.safetensors")):',
    """index = Path(sys.argv[1]) / "model.safetensors.index.json"
names = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
for shard in (Path(sys.argv[1]) / name for name in names):""",
)
"""The floor, reading the shards the index names, as check must (it holds the index to the shards): the index's
``json.loads`` is work no check can skip."""

SCRIPT = """
import sys
from pathlib import Path
from safetensors import safe_open

found = 0
for shard in sorted(Path(sys.argv[1]).glob("*.safetensors")):
    with safe_open(shard, framework="numpy") as f:
        for name in f.keys():
            if name.endswith("_global_scale"):
                scale = f.get_tensor(name)
                if scale.shape != () or not 0 < float(scale.reshape(-1)[0]) < float("inf"):
                    found += 1
print(found)
"""

TARGETS = {"legacy": 1.3, "many-findings": 1.3, "spaced-200k": 2.0}
"""The most check may take, as a multiple of the floor."""


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    assert result.returncode in (0, 1), result.stderr
    return elapsed


def spaced_shard(folder: Path, scales: int = 200_000) -> Path:
    """A one-shard checkpoint of ``scales`` (1,) F32 global scales, its header written with spaces and newlines."""
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
    return folder


def checkpoints(root: Path) -> dict[str, Path]:
    legacy = write_synthetic_checkpoint(root / "legacy", data_bytes=400_000_000, sparse=True)
    many = root / "many-findings"
    shutil.copytree(legacy, many)
    migrate_checkpoint(many)
    CORPUS["reciprocal-convention"].make(many, COMPRESSED_TENSORS_LAYOUT)
    migrate_checkpoint(many, to="legacy")
    return {"legacy": legacy, "many-findings": many, "spaced-200k": spaced_shard(root / "spaced-200k")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--rules", default="", help="also time these rules alone: 'all', or comma-separated codes")
    args = parser.parse_args()
    alone = list(RULES) if args.rules == "all" else [code for code in args.rules.split(",") if code]
    compileall.compile_dir(Path(scalar_scales.__file__).parent, quiet=1)
    root = Path(tempfile.mkdtemp(prefix="scalar-scales-check-bench-"))
    try:
        made = checkpoints(root)
        floor, indexed, script = root / "floor.py", root / "floor_with_index.py", root / "script.py"
        floor.write_text(FLOOR)
        indexed.write_text(FLOOR_WITH_INDEX)
        script.write_text(SCRIPT)
        print(f"medians of {args.repeats} runs, seconds; check --statistics --select RULES against the floor and the")
        print("safetensors script; x floor, x script: the median of the ratios of each check run over the run after it")
        print(
            f"{'checkpoint':<14} {'rules':<6} {'check':>7} {'floor':>7} {'+index':>7} {'script':>7} {'x floor':>8} "
            f"{'x +index':>9} {'x script':>9}"
        )
        verdicts = []
        for label, checkpoint in made.items():
            for selection in ["ALL", *alone]:
                check_argv = [sys.executable, "-m", "scalar_scales", "check", str(checkpoint), "--statistics"]
                check_argv += ["--select", selection]
                runs: dict[str, list[float]] = {"check": [], "floor": [], "indexed": [], "script": []}
                for _ in range(args.repeats):
                    runs["check"].append(timed(check_argv))
                    runs["floor"].append(timed([sys.executable, str(floor), str(checkpoint)]))
                    runs["indexed"].append(timed([sys.executable, str(indexed), str(checkpoint)]))
                    runs["script"].append(timed([sys.executable, str(script), str(checkpoint)]))
                medians = {name: statistics.median(times) for name, times in runs.items()}
                over = {
                    name: statistics.median(map(operator.truediv, runs["check"], runs[name]))
                    for name in ("floor", "indexed", "script")
                }
                over_floor = over["floor"]
                print(
                    f"{label:<14} {selection:<6} {medians['check']:>7.3f} {medians['floor']:>7.3f} "
                    f"{medians['indexed']:>7.3f} {medians['script']:>7.3f} {over_floor:>7.2f}x "
                    f"{over['indexed']:>8.2f}x {over['script']:>8.2f}x"
                )
                if selection == "ALL":
                    verdicts.append(f"{label}: {over_floor:.2f}x the floor (target: at most {TARGETS[label]:.1f}x)")
        print("\n".join(verdicts))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
