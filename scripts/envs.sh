#!/usr/bin/env bash
# Build, once, and cache the virtual environments the tests run in; print where they are.
#
#   scripts/envs.sh NAME...     build (unless current) and print each environment's folder
#   scripts/envs.sh --list      the environments, each with what it holds
#
# The environments, their pins and how each is built are rows of scripts/suites.toml; the builder is
# scalar_scales_testkit.proof.environments (standard library only, run with the machine's Python). An
# environment is reused while the spec it was built from is unchanged; the project and its test kit are
# installed in it (editable, no deps) from this checkout.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHONPATH="$ROOT/testkit" exec "${PYTHON:-python3.11}" -m scalar_scales_testkit.proof envs "$@"
