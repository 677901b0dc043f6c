#!/usr/bin/env bash
# Run every test: builds (once) and caches the environments, then runs each suite where it belongs.
#
#   producer         (torch 2.13 CPU, llmcompressor 0.14.0.1, compressed-tensors 0.19.0): ruff, all tests
#   producer-ct020   (the same with compressed-tensors 0.20.0):                            producer tests
#
# Extra arguments go to every pytest run, e.g. `scripts/test.sh -k marker`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 PYTHONDONTWRITEBYTECODE=1

mapfile -t ENVS < <(scripts/envs.sh producer producer-ct020)
PRODUCER=${ENVS[0]}
CT020=${ENVS[1]}

failed=()
run() {
  local name=$1; shift
  echo "== $name"
  "$@" || failed+=("$name")
}

run "ruff" "$PRODUCER/bin/python" -m ruff check .
run "tests, compressed-tensors 0.19.0" "$PRODUCER/bin/python" -m pytest -p no:cacheprovider -q tests "$@"
run "producer tests, compressed-tensors 0.20.0" "$CT020/bin/python" -m pytest -p no:cacheprovider -q tests/producer "$@"

if ((${#failed[@]})); then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all suites passed"
