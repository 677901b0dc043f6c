"""The releases the producer patch supports: its declaration (``versions.SUPPORTED``) holds every release a
producer environment runs, and a release outside it, or whose wrapped code changed, is refused in the shape of
every patch set (``scalar_scales.patching``), with nothing patched.

Each refusal is shown on a real compressed-tensors, put first on the path of a fresh interpreter: the installed
one relabelled as a release the declaration leaves out, or a copy whose NVFP4 compressor changed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import compressed_tensors

import compressed_tensors_patch
from compressed_tensors_patch import _PATCHES
from scalar_scales.patching import ALLOW_UNTESTED_ENV, import_dotted
from scalar_scales_testkit.producer import loguru_messages

APPLY = (
    "import compressed_tensors_patch as p\n"
    "from importlib import metadata\n"
    "print('compressed-tensors', metadata.version('compressed-tensors'))\n"
    "try:\n    p.apply()\nexcept p.UnsupportedUpstreamError as e:\n    print('refused:', e)\n"
    "print('applied:', p.is_applied())\n"
)
RELIED_ON = (
    "compressed_tensors.compressors.model_compressors.model_compressor.ModelCompressor.add_decompress_hook",
    "compressed_tensors.quantization.quant_config.QuantizationConfig",
)
"""Upstream code the patch relies on without wrapping it: the decompression hook that ours must run before, and
the config class whose fields tell native support apart."""


def installed() -> dict[str, str]:
    """The declared distributions installed here, and their versions."""
    found = {}
    for name in _PATCHES.supports:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def run_apply(overlay: Path, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", APPLY],
        env={**os.environ, "PYTHONPATH": str(overlay), **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout + result.stderr


def relabelled_compressed_tensors(tmp_path: Path, version: str) -> Path:
    """The installed compressed-tensors as release ``version``: its distribution metadata, renumbered, ahead of
    it on the path (the code is the installed one)."""
    overlay = tmp_path / "relabelled"
    (info,) = Path(compressed_tensors.__file__).parent.parent.glob("compressed_tensors-*.dist-info")
    current = metadata.version("compressed-tensors")
    copy = overlay / info.name.replace(current, version)
    shutil.copytree(info, copy)
    text = (copy / "METADATA").read_text()
    (copy / "METADATA").write_text(text.replace(f"\nVersion: {current}\n", f"\nVersion: {version}\n", 1))
    return overlay


def changed_compressed_tensors(tmp_path: Path) -> Path:
    """A copy of the installed compressed-tensors whose NVFP4 compressor's ``compress`` takes one parameter more."""
    overlay = tmp_path / "changed"
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
    parameters, _, returns = signature.rpartition(")")
    source.write_text(f"{head}{marker}{parameters.rstrip().rstrip(',')}, packed: bool = True){returns}:\n{body}")
    return overlay


def test_every_release_this_environment_runs_is_inside_the_declaration():
    """An environment added for a new release fails here until the declaration names it: the tests are what
    a release is supported on."""
    releases = installed()
    assert "compressed-tensors" in releases and "transformers" in releases
    assert [f"{name} {version}" for name, version in releases.items() if not _PATCHES.accepts(name, version)] == []


def test_the_transformers_declaration_holds_the_tested_series_and_not_the_releases_between_them():
    """5.17 (5.17.0 tested, 5.19.0's wrapped methods the same source) and 5.25 (5.25.0, newest-transformers); no
    environment runs 5.20 to 5.24, so the declaration leaves them out."""
    accepted = ["5.17.0", "5.19.0", "5.25.0", "5.25.1"]
    refused = ["5.16.0", "5.20.0", "5.22.1", "5.24.0", "5.26.0"]
    assert [v for v in accepted + refused if _PATCHES.accepts("transformers", v)] == accepted


def test_every_row_and_the_code_the_patch_relies_on_resolve_on_this_environment_s_releases():
    """The declaration says which releases; the rows say what of them the patch touches, and all of it must be
    there, with the parameters the wrappers call it with."""
    rows = _PATCHES.patches
    assert len({row.target for row in rows}) == len(rows) == 8
    for row in rows:
        row.resolve()
    assert [target for target in RELIED_ON if import_dotted(target) is None] == []


def test_the_applied_line_names_each_installed_release_the_declaration_covers():
    """The one log line says which releases were patched, so a report names what it ran on."""
    with loguru_messages() as messages:
        compressed_tensors_patch.apply()
    (message,) = [m for m in messages if m.startswith("compressed_tensors_patch: ")]
    releases = ", ".join(f"{name} {version}" for name, version in installed().items())
    assert message.startswith(
        f"compressed_tensors_patch: scalar-scales: compressed_tensors_patch applied to {releases}: "
    )


def test_a_declared_release_whose_nvfp4_compress_takes_other_parameters_is_refused_naming_it(tmp_path):
    """A release inside the declaration is held to the code the wrappers were written for."""
    output = run_apply(changed_compressed_tensors(tmp_path))
    (refusal,) = [line for line in output.splitlines() if line.startswith("refused:")]
    assert refusal.startswith("refused: compressed_tensors_patch supports compressed-tensors >=0.19,<0.21, ")
    assert refusal.endswith(
        "installed, but compressed_tensors.compressors.nvfp4.base.NVFP4PackedCompressor.compress takes "
        "('cls', 'state_dict', 'scheme', 'packed'), not ('cls', 'state_dict', 'scheme'), so nothing was patched"
    )
    assert "applied: False" in output


def test_the_opt_in_patches_a_release_outside_the_declaration_with_one_warning(tmp_path):
    """A release the declaration leaves out (the installed code, numbered 0.21.0) is refused, and patched with one
    warning on llm-compressor's console once the opt-in asks for it."""
    overlay = relabelled_compressed_tensors(tmp_path, "0.21.0")
    refused = run_apply(overlay)
    assert "compressed-tensors 0.21.0\n" in refused and "applied: False" in refused
    output = run_apply(overlay, **{ALLOW_UNTESTED_ENV: "1"})
    assert "applied: True" in output
    (warning,) = [line for line in output.splitlines() if "| WARNING - scalar-scales: " in line]
    assert warning.endswith(
        "| WARNING - scalar-scales: compressed_tensors_patch supports compressed-tensors >=0.19,<0.21; "
        f"compressed-tensors 0.21.0 is installed, patched anyway because {ALLOW_UNTESTED_ENV}=1"
    )
