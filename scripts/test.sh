#!/usr/bin/env bash
# Run every test: build (once) the environments, then every suite of scripts/suites.toml where it belongs,
# over both cores, and print one table of what ran.
#
#   scripts/test.sh [--jobs N] [--fresh] [PYTEST ARGUMENTS ...]
#
# The table (scripts/suites.toml) lists each environment (its pins, how it is built) and each suite (its
# environment, its tests or command, what it reads and writes). The suites run as a graph: the producer
# environments write the round trip's artifacts (scripts/make_artifacts.py, scripts/make_modelopt_artifacts.py),
# each once per run or taken from the content-keyed cache beside the environments, and every suite that reads
# them starts once they are there, the longest chain first. Each suite's output is kept whole and printed whole
# if it fails. At the end: the suite table (lane, seconds, tests passed and skipped, the cache entries reused),
# and the manifest comparison: every test of the baseline (tests/manifest/) still runs.
#
# Without arguments everything runs, including the generated docs' checks (docs/compatibility.md, the README's
# decision guide, docs/check-evidence.md) and the upstream patches' checks. Extra arguments go to every pytest
# suite, e.g. `scripts/test.sh -k marker`; such a run checks neither the docs nor the upstream patches, and a
# suite in which it selects nothing is reported as skipped, not failed. --jobs 1 runs one suite at a time;
# --fresh takes nothing from the cache.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PYTHONPATH="$ROOT/testkit" exec "${PYTHON:-python3.11}" -m scalar_scales_testkit.proof run "$@"
