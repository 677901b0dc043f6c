#!/usr/bin/env bash
# Set up the producer environment (cached) and run the demo on the built-in toy MoE.
# Arguments go to `scalar-scales-demo`, e.g. `scripts/demo.sh --scheme NVFP4A16`.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
PRODUCER=$("$ROOT/scripts/envs.sh" producer)
exec "$PRODUCER/bin/scalar-scales-demo" "$@"
