"""The public API: apply, revert, applied, is_applied, FORMAT_VERSION; version gate."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import compressed_tensors_patch
from compressed_tensors_patch import _PATCHES
from scalar_scales.patching import import_dotted
from scalar_scales_testkit.producer import loguru_messages

UNSUPPORTED_OVERLAY = Path(sys.prefix) / "overlays" / "compressed-tensors-0.17.0"


def current_objects() -> list[object]:
    return [vars(import_dotted(p.owner))[p.attribute] for p in _PATCHES.patches]


def test_format_version_is_2():
    assert compressed_tensors_patch.FORMAT_VERSION == 2


def test_apply_replaces_every_row():
    originals = current_objects()
    compressed_tensors_patch.apply()
    assert all(now is not before for now, before in zip(current_objects(), originals, strict=True))


def test_revert_restores_every_original_object_exactly():
    originals = current_objects()
    compressed_tensors_patch.apply()
    compressed_tensors_patch.revert()
    assert all(now is before for now, before in zip(current_objects(), originals, strict=True))


def test_apply_is_idempotent():
    originals = current_objects()
    compressed_tensors_patch.apply()
    patched = current_objects()
    compressed_tensors_patch.apply()
    assert all(now is first for now, first in zip(current_objects(), patched, strict=True))
    compressed_tensors_patch.revert()
    assert all(now is before for now, before in zip(current_objects(), originals, strict=True))


def test_is_applied_follows_apply_and_revert():
    assert not compressed_tensors_patch.is_applied()
    compressed_tensors_patch.apply()
    assert compressed_tensors_patch.is_applied()
    compressed_tensors_patch.revert()
    assert not compressed_tensors_patch.is_applied()


def test_applied_reverts_on_exit_even_after_an_error():
    with pytest.raises(KeyError), compressed_tensors_patch.applied():
        assert compressed_tensors_patch.is_applied()
        raise KeyError("boom")
    assert not compressed_tensors_patch.is_applied()


def test_applied_inside_apply_leaves_the_patch_applied():
    compressed_tensors_patch.apply()
    with compressed_tensors_patch.applied():
        pass
    assert compressed_tensors_patch.is_applied()


def test_apply_logs_one_line_naming_the_version_and_targets():
    with loguru_messages() as messages:
        compressed_tensors_patch.apply()
    (message,) = [m for m in messages if m.startswith("compressed_tensors_patch: ")]
    assert "compressed-tensors 0." in message
    assert "NVFP4PackedCompressor.compress" in message


def test_the_applied_line_shows_by_default_in_an_llm_compressor_run():
    """llm-compressor configures loguru when imported; the line goes to its console like llm-compressor's own."""
    script = "import llmcompressor, compressed_tensors_patch\ncompressed_tensors_patch.apply()\n"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    console = result.stdout + result.stderr
    (line,) = [line for line in console.splitlines() if "compressed_tensors_patch applied to" in line]
    assert "| INFO - scalar-scales: compressed_tensors_patch applied to compressed-tensors 0." in line


def test_apply_refuses_an_unsupported_release_and_patches_nothing():
    """A real compressed-tensors 0.17.0 (vLLM's pin), put first on the path of a fresh interpreter."""
    assert UNSUPPORTED_OVERLAY.is_dir(), "build the environment with scripts/envs.sh"
    script = (
        "import compressed_tensors_patch as p\n"
        "try:\n    p.apply()\nexcept p.UnsupportedUpstreamError as e:\n    print('refused:', e)\n"
        "print('applied:', p.is_applied())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(UNSUPPORTED_OVERLAY)}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert (
        "refused: compressed_tensors_patch supports compressed-tensors >=0.19,<0.21; compressed-tensors 0.17.0 is "
        "installed, so nothing was patched (SCALAR_SCALES_ALLOW_UNTESTED_UPSTREAM=1 tries anyway)\n"
    ) in result.stdout
    assert "applied: False" in result.stdout
