"""``scalar-scales check`` against the short script a user writes with the ``safetensors`` library, each rule
alone and all together, side by side in one run.

The checkpoints are the synthetic V4-Flash-shaped one (43 layers x 256
experts x 3 projections, 46 shards, data as sparse holes: check reads
headers and scales only):

- ``legacy``: 66,048 (1,) global scales, otherwise consistent, so its only
  finding is NV101 (66,048 findings);
- ``many-findings``: the same, every global scale also stored in the other
  convention (NV302), 132,096 findings.

The script (``SCRIPT``) is what a user writes to look at the same scales:
``safe_open`` with numpy, every global scale's shape and value. Both run as
whole commands, in new processes, alternately, and each is timed ``--repeats``
times; the table gives their medians and the median of check's time over the
script's run just after it (a pair shares the machine's state of the moment,
which on a shared machine drifts by more than the difference measured). The
target: every rule, alone and all together, takes no more time than the script.

    OMP_NUM_THREADS=1 python benchmarks/check.py [--repeats 11] [--rules all|NV101,...]
"""

from __future__ import annotations

import argparse
import operator
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scalar_scales.doctor import RULES
from scalar_scales.migrate import migrate_checkpoint
from scalar_scales.nvfp4 import COMPRESSED_TENSORS_LAYOUT
from scalar_scales_testkit.broken import CORPUS
from scalar_scales_testkit.synthetic import write_synthetic_checkpoint

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


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    assert result.returncode in (0, 1), result.stderr
    return elapsed


def checkpoints(root: Path) -> dict[str, Path]:
    legacy = write_synthetic_checkpoint(root / "legacy", data_bytes=400_000_000, sparse=True)
    many = root / "many-findings"
    shutil.copytree(legacy, many)
    migrate_checkpoint(many)
    CORPUS["reciprocal-convention"].make(many, COMPRESSED_TENSORS_LAYOUT)
    migrate_checkpoint(many, to="legacy")
    return {"legacy": legacy, "many-findings": many}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--rules", default="all", help="'all', or comma-separated codes to time alone")
    args = parser.parse_args()
    selections = ["ALL", *(RULES if args.rules == "all" else args.rules.split(","))]
    root = Path(tempfile.mkdtemp(prefix="scalar-scales-check-bench-"))
    try:
        made = checkpoints(root)
        script = root / "script.py"
        script.write_text(SCRIPT)
        print(f"medians of {args.repeats} runs, seconds; check --quiet --select RULE against the safetensors script;")
        print("check/script: the median of the ratios of each check run and the script run after it")
        print(f"{'checkpoint':<14} {'rules':<6} {'check':>7} {'script':>7} {'check/script':>12}")
        worst = 0.0
        for label, checkpoint in made.items():
            for selection in selections:
                check_argv = [sys.executable, "-m", "scalar_scales", "check", str(checkpoint), "--quiet"]
                check_argv += ["--select", selection]
                script_argv = [sys.executable, str(script), str(checkpoint)]
                checks, scripts = [], []
                for _ in range(args.repeats):
                    checks.append(timed(check_argv))
                    scripts.append(timed(script_argv))
                check, reference = statistics.median(checks), statistics.median(scripts)
                ratio = statistics.median(map(operator.truediv, checks, scripts))
                worst = max(worst, ratio)
                print(f"{label:<14} {selection:<6} {check:>7.3f} {reference:>7.3f} {ratio:>11.2f}x")
        print(f"worst check/script: {worst:.2f}x (target: at most 1.00x)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
