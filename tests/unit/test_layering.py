"""What may import what (docs/architecture.md): the base package nothing above it, no product the test kit."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATCHES = {"compressed_tensors_patch", "vllm_patch"}
TEST_KIT = "scalar_scales_testkit"
EDITS = ("insert", "append", "extend")


def imported_packages(package: str) -> dict[str, set[str]]:
    """Top-level package of every import in each module of ``package``, by module file."""
    found = {}
    for path in sorted((ROOT / package).glob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
        found[path.name] = names
    return found


def test_the_base_package_imports_neither_patch_package_nor_the_test_kit():
    leaks = {name: sorted(found & (PATCHES | {TEST_KIT})) for name, found in imported_packages("scalar_scales").items()}
    assert {name: found for name, found in leaks.items() if found} == {}


@pytest.mark.parametrize("package", sorted(PATCHES))
def test_a_patch_package_imports_neither_the_other_nor_the_test_kit(package):
    others = (PATCHES - {package}) | {TEST_KIT}
    leaks = {name: sorted(found & others) for name, found in imported_packages(package).items()}
    assert {name: found for name, found in leaks.items() if found} == {}


@pytest.mark.parametrize("folder", ["tests", "scripts", "benchmarks", "testkit"])
def test_nothing_edits_sys_path_to_find_code(folder):
    edits = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != Path(__file__).resolve() and any(f"sys.path.{edit}" in path.read_text() for edit in EDITS)
    ]
    assert edits == []
