"""The producer patch recognises upstream by the code it runs: recorded fingerprints, refusal naming what differs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import compressed_tensors

import compressed_tensors_patch
from compressed_tensors_patch.tested_upstream import TESTED
from compressed_tensors_patch.versions import ALLOW_UNTESTED_ENV, distribution_of, fingerprint

ROOT = Path(__file__).resolve().parents[2]
APPLY = (
    "import compressed_tensors, compressed_tensors_patch as p\n"
    "assert compressed_tensors.__file__.startswith({overlay!r}), compressed_tensors.__file__\n"
    "try:\n    p.apply()\nexcept p.UnsupportedUpstreamError as e:\n    print('refused:', e)\n"
    "print('applied:', p.is_applied())\n"
)


def test_this_environment_s_upstream_code_is_recorded_under_its_releases():
    """The record is stale unless scripts/fingerprints.py has run in this environment."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "fingerprints.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_wrapped_and_depended_on_function_has_a_fingerprint():
    targets = compressed_tensors_patch.upstream_code()
    assert len(targets) == len(set(targets)) >= 10
    assert all(fingerprint(target) in TESTED[target] for target in targets)


def test_a_record_names_the_release_it_came_from():
    target = "compressed_tensors.compressors.nvfp4.base.NVFP4PackedCompressor.compress"
    assert distribution_of(target) in TESTED[target][fingerprint(target)]


def changed_compressed_tensors(tmp_path: Path) -> Path:
    """A copy of the installed compressed-tensors whose NVFP4 compressor's ``compress`` has one more line."""
    overlay = tmp_path / "overlay"
    package = Path(compressed_tensors.__file__).parent
    shutil.copytree(package, overlay / "compressed_tensors", ignore=shutil.ignore_patterns("__pycache__"))
    for info in package.parent.glob("compressed_tensors-*.dist-info"):
        shutil.copytree(info, overlay / info.name)
    source = overlay / "compressed_tensors" / "compressors" / "nvfp4" / "base.py"
    text = source.read_text()
    marker = "    def compress(\n"
    assert text.count(marker) == 1
    head, tail = text.split(marker)
    signature, body = tail.split(":\n", 1)
    source.write_text(f"{head}{marker}{signature}:\n        _ = 'a changed line'\n{body}")
    return overlay


def run_apply(overlay: Path, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", APPLY.format(overlay=str(overlay))],
        env={**os.environ, "PYTHONPATH": str(overlay), **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout + result.stderr


def test_a_release_whose_nvfp4_compressor_changed_is_refused_naming_it_with_nothing_patched(tmp_path):
    output = run_apply(changed_compressed_tensors(tmp_path))
    (refusal,) = [line for line in output.splitlines() if line.startswith("refused:")]
    assert "the installed code of NVFP4PackedCompressor.compress (compressed-tensors " in refusal
    assert refusal.count("; tested: ") == 1, "only the changed function is named"
    assert "applied: False" in output


def test_the_opt_in_patches_an_untested_release_with_a_warning(tmp_path):
    output = run_apply(changed_compressed_tensors(tmp_path), **{ALLOW_UNTESTED_ENV: "1"})
    assert "applied: True" in output
    (warning,) = [line for line in output.splitlines() if "| WARNING - " in line and "differs from every" in line]
    assert "NVFP4PackedCompressor.compress" in warning and f"patching anyway because {ALLOW_UNTESTED_ENV}=1" in warning
