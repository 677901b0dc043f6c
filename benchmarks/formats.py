"""``scalar-scales check --output-format X`` against the text report, side by side in one run, on the synthetic
V4-Flash-shaped checkpoint: 43 layers x 256 experts x 3 projections, 46 shards, data as sparse holes, 66,048 (1,)
global scales, so its only finding is NV101, 66,048 times (45 MB of JSON, 35 MB of SARIF).

Each format runs as the whole command, in a new process, its output to
``/dev/null``, alternately with the text report (the default, without
``--statistics``), each ``--repeats`` times. The table gives the medians, the
output's size, each run's peak memory (``os.wait4``), and the median of
each run's time over the text run just before it (a pair shares the
machine's state of the moment, which on a shared machine drifts by more
than the difference measured). The target: json and sarif at most 1.5x the
text.

The package is byte-compiled first, as an installed wheel is, so that no run
compiles it.

    OMP_NUM_THREADS=1 python benchmarks/formats.py [--repeats 7] [--checkpoint DIR]

Measured on 2 shared cores (load average 6 to 9, so seconds are slow, and
the ratios are the figures), ``--checkpoint`` the checkpoint above, two runs
of ``--repeats 9`` and ``7``; before: each document built whole as dicts and
written by ``json.dumps(document, indent=2)``, then printed at once:

    format  x text before  x text after  peak MiB before  peak MiB after  output
    json    1.76x, 1.80x   1.10x, 1.22x  351              147             45.3 MB
    sarif   5.90x, 5.00x   1.30x, 1.25x  713              154             86.3 MB
    github  1.09x, 0.97x   1.00x, 1.05x  145              145             (the text's 145)

The documents' bytes are the same before and after.

Then SARIF became one result per rule and file, each finding a location of it (up to 1,000 a result: GitHub
code scanning's limits); ``--repeats 5``, the same machine, before and after:

    format  x text before  x text after  peak MiB before  peak MiB after  output before  output after
    sarif   1.19x          1.03x, 1.06x  152              242, 145        84.5 MB        34.9 MB

(242 MiB: the results written 2,048 at a time, each up to a megabyte; 145: one at a time, as now.)
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import scalar_scales
from scalar_scales.doctor.report import OUTPUT_FORMATS
from scalar_scales_testkit.synthetic import write_synthetic_checkpoint

TARGET = {"json": 1.5, "sarif": 1.5}
"""The most a format may take, as a multiple of the text report."""


def timed(argv: list[str]) -> tuple[float, float]:
    """The command's wall seconds and peak memory (MiB), its output thrown away."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.stderr is not None
    stderr = process.stderr.read()
    process.stderr.close()
    assert process.returncode in (0, 1), stderr
    return elapsed, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--checkpoint", type=Path, help="a V4-Flash-shaped checkpoint already written")
    args = parser.parse_args()
    compileall.compile_dir(Path(scalar_scales.__file__).parent, quiet=1)
    root = Path(tempfile.mkdtemp(prefix="scalar-scales-formats-bench-"))
    try:
        checkpoint = args.checkpoint or write_synthetic_checkpoint(root / "v4", data_bytes=400_000_000, sparse=True)
        check = [sys.executable, "-m", "scalar_scales", "check", str(checkpoint)]
        print(f"medians of {args.repeats} runs; x text: the median of each run's time over the text run before it")
        print(f"{'format':<8} {'seconds':>8} {'text':>8} {'x text':>8} {'output':>10} {'peak MiB':>9} {'text MiB':>9}")
        verdicts = []
        for name in (name for name in OUTPUT_FORMATS if name != "text"):
            argv = [*check, "--output-format", name]
            written = root / f"report.{name}"
            with written.open("wb") as out:
                assert subprocess.run(argv, stdout=out, check=False).returncode in (0, 1)
            size = written.stat().st_size
            written.unlink()
            text_runs, runs, text_peaks, peaks = [], [], [], []
            for _ in range(args.repeats):
                for times, memory, command in ((text_runs, text_peaks, check), (runs, peaks, argv)):
                    seconds, peak = timed(command)
                    times.append(seconds)
                    memory.append(peak)
            over = statistics.median(run / text for run, text in zip(runs, text_runs, strict=True))
            print(
                f"{name:<8} {statistics.median(runs):>8.3f} {statistics.median(text_runs):>8.3f} {over:>7.2f}x "
                f"{size / 1e6:>8.1f}MB {max(peaks):>9.0f} {max(text_peaks):>9.0f}"
            )
            if name in TARGET:
                verdicts.append(f"{name}: {over:.2f}x the text (target: at most {TARGET[name]:.1f}x)")
        print("\n".join(verdicts))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
