#!/usr/bin/env bash
# The GPU check: one command for a CUDA machine that has torch and transformers but reaches no registry.
#
#   scripts/gpu_wheels.sh            beforehand, where pip reaches the registry (fills .whl/)
#   scripts/gpu_check.sh [WHEELS]    on the GPU machine, from the repository root; about 2 minutes
#
# Installs the wheels offline (no dependencies resolved, so the machine's torch
# stays), then runs tests/gpu on CUDA: the toy MoE quantized with `oneshot`,
# legacy and format 2; both reloaded on CUDA against the bf16 logits;
# `vllm_patch.to_scalar` and the scale-loading shapes on CUDA tensors; and
# whether `param[e][i] = (1,)-tensor` and `param[e][i].copy_((1,)-tensor)`
# behave on CUDA as they do on the CPU. Prints the results table (the
# Markdown of docs/gpu-results.md) and writes it to $OUT/gpu-results.md
# where OUT is set.
#
# WHEELS="" skips the install (an environment that already has the packages).
# SCALAR_SCALES_GPU_DRY_RUN=1 runs the same tests on the CPU, to try the script
# where there is no GPU; its table says "cpu (dry run)".
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
WHEELS=${1-$ROOT/.whl}
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/scalar-scales-gpu.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

if [[ -n $WHEELS ]]; then
  "$PYTHON" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" "$WHEELS"/*.whl
  export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TQDM_DISABLE=1
export SCALAR_SCALES_GPU_RESULTS=$WORK/gpu.jsonl

if [[ ${SCALAR_SCALES_GPU_DRY_RUN:-} != 1 ]] && ! "$PYTHON" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
  echo "gpu_check: no CUDA device (SCALAR_SCALES_GPU_DRY_RUN=1 tries the check on the CPU)" >&2
  exit 2
fi
status=0
timeout 420 "$PYTHON" -m pytest -p no:cacheprovider -q -rs tests/gpu || status=$?
"$PYTHON" scripts/gpu_report.py "$SCALAR_SCALES_GPU_RESULTS" | tee "${OUT:-$WORK}/gpu-results.md"
exit $status
