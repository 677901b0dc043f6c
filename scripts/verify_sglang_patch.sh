#!/usr/bin/env bash
# Verify upstream/sglang.patch against SGLang's sources: it applies, and the project's SGLang tests pass on the
# patched sources without the plugin.
#
#   scripts/verify_sglang_patch.sh PYTHON
#
# PYTHON is the sglang environment's interpreter (scripts/envs.sh sglang); its SGLang release is the one
# verified. Its Python sources are copied into a tree laid out as SGLang's repository (python/sglang/...),
# where the patch must apply with `patch -p1`; then, with that tree first on the path and the plugin never
# loaded, tests/sglang_loading/test_sglang_upstream_patch.py loads every form of the MLA toys' artifacts
# (SCALAR_SCALES_ARTIFACTS, as scripts/test.sh writes them).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${1:?usage: scripts/verify_sglang_patch.sh PYTHON}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/scalar-scales-sglang-upstream.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1

SITE=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
VERSION=$("$PYTHON" -c "from importlib.metadata import version; print(version('sglang'))")
mkdir -p "$WORK/python"
cp -r "$SITE/sglang" "$WORK/python/sglang"
(cd "$WORK" && patch -p1 --dry-run --quiet < "$ROOT/upstream/sglang.patch" && patch -p1 --quiet < "$ROOT/upstream/sglang.patch")
echo "upstream/sglang.patch applies with patch -p1 to SGLang $VERSION's sources (python/sglang/...)"
cd "$ROOT"
SCALAR_SCALES_SGLANG_UPSTREAM="$WORK/python" PYTHONPATH="$WORK/python${PYTHONPATH:+:$PYTHONPATH}" \
  "$PYTHON" -m pytest -p no:cacheprovider -q tests/sglang_loading/test_sglang_upstream_patch.py
