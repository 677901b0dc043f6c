#!/usr/bin/env bash
# Verify upstream/compressed-tensors.patch against a compressed-tensors release's own sources and test suite.
#
#   scripts/verify_upstream_patch.sh PYTHON
#
# PYTHON is an interpreter whose environment has a released compressed-tensors,
# its dependencies and llm-compressor; the release it has is the one verified
# (scripts/test.sh passes producer-ct0201: the newest, 0.20.1).
#
#  1. Download that release's sdist (the full repository, tests included;
#     cached) and unpack it twice. The patch must apply with `patch -p1` to one copy.
#  2. Build both trees (BUILD_TYPE=release: both report the release's version) and
#     install each, without dependencies, into its own folder.
#  3. Run compressed-tensors' test suite from each tree against its own build,
#     on the CPU, offline; compare (scripts/compare_test_runs.py): no test may
#     go from pass to fail, and the new tests must pass. Tests that do not pass
#     in either run (they need CUDA or the Hugging Face hub) are listed.
#  4. Check the changed files with compressed-tensors' own style tools and
#     settings (black 22.12.0, isort 5.8.0, flake8: its `dev` extra; cached).
#  5. With the patched build first on the path and no runtime patch, run
#     tests/upstream: the artifacts of every save path equal, byte for byte,
#     those the runtime patch writes on the released package (scripts/save_paths.py),
#     and compressed_tensors_patch.apply() detects native support.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${1:?usage: scripts/verify_upstream_patch.sh PYTHON}
VERSION=$("$PYTHON" -c "from importlib.metadata import version; print(version('compressed-tensors'))")
CACHE=${SCALAR_SCALES_CACHE:-$HOME/.cache/scalar-scales}/upstream
SDIST=$CACHE/compressed_tensors-$VERSION.tar.gz
WORK=$(mktemp -d "${TMPDIR:-/tmp}/scalar-scales-upstream.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PIP_DISABLE_PIP_VERSION_CHECK=1 TQDM_DISABLE=1

quiet_pip() { "$PYTHON" -m pip "$@" --quiet 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

if [[ ! -f $SDIST ]]; then
  mkdir -p "$CACHE"
  quiet_pip download --no-deps --no-binary=:all: -d "$CACHE" "compressed-tensors==$VERSION"
fi

for tree in unpatched patched; do
  mkdir -p "$WORK/$tree"
  tar -xzf "$SDIST" -C "$WORK/$tree"
done
SRC=compressed_tensors-$VERSION
(cd "$WORK/patched/$SRC" && patch -p1 --dry-run --quiet < "$ROOT/upstream/compressed-tensors.patch" \
  && patch -p1 --quiet < "$ROOT/upstream/compressed-tensors.patch")
echo "upstream/compressed-tensors.patch applies with patch -p1 to the compressed-tensors $VERSION sdist"

# The unpatched tree's run depends on nothing of ours: its result is kept, keyed by the sdist's and the
# environment's content (every installed distribution, by version) and the seeding plugin's, and reused while
# they are unchanged. Every test of both runs starts from one random state (scripts/upstream_seed.py).
BASELINE_KEY=$( (cat "$SDIST" "$ROOT/scripts/upstream_seed.py" | sha256sum; "$PYTHON" -m pip freeze --all 2>/dev/null | grep -vi "scalar") | sha256sum | cut -c1-32)
BASELINE=$CACHE/unpatched-$BASELINE_KEY.xml
TREES=(patched)
if [[ -f $BASELINE && -f $BASELINE.complete ]]; then
  cp "$BASELINE" "$WORK/unpatched.xml"
  echo "unpatched build: compressed-tensors $VERSION's own suite, its result reused from $BASELINE"
else
  TREES=(unpatched patched)
fi
for tree in "${TREES[@]}"; do
  BUILD_TYPE=release quiet_pip wheel --no-deps -w "$WORK/$tree/wheel" "$WORK/$tree/$SRC"
  quiet_pip install --no-deps --target "$WORK/$tree/site" "$WORK/$tree/wheel"/*.whl
  built=$(PYTHONPATH="$WORK/$tree/site" "$PYTHON" -c "import compressed_tensors as c; print(c.__version__, c.__file__)")
  echo "$tree build: compressed-tensors $built"
  (cd "$WORK/$tree/$SRC" && PYTHONPATH="$WORK/$tree/site:$ROOT/scripts" "$PYTHON" -m pytest -p no:cacheprovider -p upstream_seed -q -o addopts="" \
    --junitxml="$WORK/$tree.xml" tests > "$WORK/$tree.log" 2>&1) || true
  tail -1 "$WORK/$tree.log"
  if [[ $tree == unpatched ]]; then
    cp "$WORK/unpatched.xml" "$BASELINE" && touch "$BASELINE.complete"
  fi
done

status=0
STYLE=$CACHE/style-venv
if [[ ! -x $STYLE/bin/flake8 ]]; then
  python3 -m venv "$STYLE"
  PYTHON=$STYLE/bin/python quiet_pip install black==22.12.0 isort==5.8.0 flake8==7.5.0
fi
mapfile -t CHANGED < <(sed -n 's|^+++ b/||p' "$ROOT/upstream/compressed-tensors.patch")
(cd "$WORK/patched/$SRC" && "$STYLE/bin/black" --check --quiet "${CHANGED[@]}" && "$STYLE/bin/isort" --check-only --quiet \
  "${CHANGED[@]}" && "$STYLE/bin/flake8" "${CHANGED[@]}" && echo "style: black, isort and flake8 pass on ${#CHANGED[@]} files") \
  || { echo "style: the patch does not pass compressed-tensors' black/isort/flake8"; status=1; }

"$PYTHON" "$ROOT/scripts/compare_test_runs.py" "$WORK/unpatched.xml" "$WORK/patched.xml" \
  --new-tests test_nvfp4_global_scale_layout || status=1

"$PYTHON" "$ROOT/scripts/save_paths.py" "$WORK/runtime-saves" > /dev/null
(cd "$ROOT" && SCALAR_SCALES_RUNTIME_SAVES="$WORK/runtime-saves" PYTHONPATH="$WORK/patched/site" \
  "$PYTHON" -m pytest -p no:cacheprovider -q tests/upstream) || status=1
exit $status
