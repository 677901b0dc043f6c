#!/usr/bin/env bash
# Fetch, where pip reaches the registry, the wheels scripts/gpu_check.sh installs offline on a GPU machine.
#
#   scripts/gpu_wheels.sh [DIR]        (default: .whl at the repository root, ignored by git)
#
# The GPU machine has Python 3.12, torch, transformers, safetensors, accelerate,
# pandas, pyarrow, xxhash and pytest, but no compressed-tensors, llm-compressor
# or their pure-Python needs, and no registry. The project's wheel and its test kit's
# (tests/gpu imports it) come last. These are the producer
# environment's versions, for CPython 3.12 manylinux, without dependencies
# (pip must not resolve a torch there). About 5 MB.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${1:-$ROOT/.whl}
PACKAGES=(
  compressed-tensors==0.19.0 llmcompressor==0.14.0.1 auto-round==0.15.1 loguru==0.7.3
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0
  datasets==5.2.0 multiprocess==0.70.19 dill==0.4.1
)
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64)

rm -rf "$DIR"
mkdir -p "$DIR"
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]/#/--platform=}" -d "$DIR" "${PACKAGES[@]}" \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
python3 -m pip wheel --quiet --no-deps -w "$DIR" "$ROOT" "$ROOT/testkit"
ls "$DIR"
du -sh "$DIR"
