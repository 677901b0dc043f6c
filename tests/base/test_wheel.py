"""The wheel ships the four product packages only, and its base package works in a venv without torch."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from scalar_scales_testkit.publishing import project_wheel

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = {"scalar_scales", "compressed_tensors_patch", "vllm_patch", "sglang_patch"}

IMPORT_EVERY_MODULE = """
import importlib, pkgutil, sys
import scalar_scales
modules = pkgutil.walk_packages(scalar_scales.__path__, "scalar_scales.")
names = [m.name for m in modules if m.name != "scalar_scales.__main__"]  # the command itself: it runs and exits
for name in names:
    importlib.import_module(name)
print(len(names), "modules;", "torch" if "torch" in sys.modules else "no torch", ";", scalar_scales.__file__)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel the test command built once ($SCALAR_SCALES_WHEEL, scripts/build_wheel.py), or one built here the
    same way: from a copy of the project's files as git takes them (a build writes build/ beside its sources), so
    the test kit is there beside the product packages and pyproject.toml's package list leaves it out."""
    return project_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def clean_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv (no system site-packages, so no torch) with the wheel installed by pip, offline."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
    )
    return venv


def test_the_wheel_holds_the_product_packages_and_no_test_kit(wheel):
    with zipfile.ZipFile(wheel) as archive:
        top = {name.split("/")[0] for name in archive.namelist() if not name.split("/")[0].endswith(".dist-info")}
    assert top == PRODUCT


def test_the_wheel_ships_the_schema_of_checks_json(wheel):
    with zipfile.ZipFile(wheel) as archive:
        shipped = archive.read("scalar_scales/doctor/report/check-report.schema.json")
    assert shipped == (ROOT / "scalar_scales/doctor/report/check-report.schema.json").read_bytes()


def test_the_installed_package_reads_its_schema(clean_venv):
    code = "from scalar_scales.doctor.report import schema_text; import json; print(json.loads(schema_text())['$id'])"
    result = subprocess.run([clean_venv / "bin" / "python", "-c", code], capture_output=True, text=True, cwd=clean_venv)
    assert (result.returncode, result.stdout.strip()) == (0, "urn:scalar-scales:check-report:1"), result.stderr


def test_every_module_of_the_base_package_imports_in_a_venv_without_torch(clean_venv):
    python = clean_venv / "bin" / "python"
    assert subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0
    result = subprocess.run([python, "-c", IMPORT_EVERY_MODULE], capture_output=True, text=True, cwd=clean_venv)
    assert result.returncode == 0, result.stderr
    count, torch_state, location = result.stdout.strip().split(";")
    sources = {p for p in (ROOT / "scalar_scales").rglob("*.py") if p.name != "__main__.py"}
    assert int(count.split()[0]) == len(sources) - 1  # every module and sub-package, but the package itself
    assert torch_state.strip() == "no torch"
    assert location.strip().startswith(str(clean_venv))


def test_the_installed_command_runs_in_a_venv_without_torch(clean_venv):
    result = subprocess.run([clean_venv / "bin" / "scalar-scales", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("scalar-scales "), result.stderr


def test_a_hub_check_without_the_hub_extra_says_how_to_install_it(clean_venv):
    result = subprocess.run(
        [clean_venv / "bin" / "scalar-scales", "check", "hf://org/model"], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr == (
        "scalar-scales: error: hf://org/model: checking a Hub repository needs huggingface_hub: "
        "pip install 'scalar-scales[hub]'\n"
    )


def test_the_base_install_has_no_dependency_and_the_hub_extra_only_huggingface_hub(clean_venv):
    python = clean_venv / "bin" / "python"
    code = "import json; from importlib import metadata; print(json.dumps(metadata.requires('scalar-scales')))"
    result = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    requirements = [r.replace(" ", "") for r in json.loads(result.stdout)]
    assert all(";extra==" in r for r in requirements)
    assert [r.split(";")[0] for r in requirements if r.endswith('extra=="hub"')] == ["huggingface_hub>=1.0"]
