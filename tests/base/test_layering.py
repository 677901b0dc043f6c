"""What may import what (docs/architecture.md): layers from the bottom up, no import cycle of any kind, and no
product package importing the test kit.

Every import statement counts, wherever it stands: at module level, inside
a function, or under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("scalar_scales", "compressed_tensors_patch", "vllm_patch", "sglang_patch")
TEST_KIT = "scalar_scales_testkit"
EDITS = ("insert", "append", "extend")

BASE_LAYERS = (
    (
        "scalar_scales.errors",
        "scalar_scales.environment",
        "scalar_scales.nvfp4",
        "scalar_scales.shell",
        "scalar_scales.version",
    ),
    ("scalar_scales.patching", "scalar_scales.import_hook"),
    ("scalar_scales.system",),
    ("scalar_scales.files",),
    ("scalar_scales.sources",),
    ("scalar_scales.scan",),
    ("scalar_scales.consumers",),
    ("scalar_scales.doctor", "scalar_scales.migration"),
    ("scalar_scales.api",),
    ("scalar_scales", "scalar_scales.cli", "scalar_scales.__main__", "scalar_scales.start"),
)
"""The base package's layers, bottom first: a module imports from its own layer or those below, never above."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: str) -> dict[str, Path]:
    return {module_name(path): path for path in sorted((ROOT / package).rglob("*.py"))}


def imports(path: Path, name: str) -> set[str]:
    """Every module this one imports, with relative imports resolved."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def product_graph() -> dict[str, set[str]]:
    """Each product module -> the product modules it imports (a name imported from a package is the package)."""
    every = {name: path for package in PRODUCT for name, path in modules(package).items()}
    return {name: {i for i in imports(path, name) if i in every and i != name} for name, path in every.items()}


def layer_of(module: str) -> int:
    best = [
        (len(prefix), index)
        for index, layer in enumerate(BASE_LAYERS)
        for prefix in layer
        if module == prefix or (module.startswith(prefix + ".") and prefix != "scalar_scales")
    ]
    assert best, f"{module} is in no layer of BASE_LAYERS"
    return max(best)[1]


def test_every_base_module_is_in_a_layer():
    for module in modules("scalar_scales"):
        layer_of(module)


def test_no_base_module_imports_a_layer_above_its_own():
    upward = {
        module: sorted(i for i in imported if i.startswith("scalar_scales") and layer_of(i) > layer_of(module))
        for module, imported in product_graph().items()
        if module.startswith("scalar_scales")
    }
    assert {module: found for module, found in upward.items() if found} == {}


def test_no_product_module_is_part_of_an_import_cycle():
    graph = product_graph()
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        for target in sorted(graph[module]):
            if target in path:
                cycles.append([*path[path.index(target) :], target])
            elif target not in done:
                visit(target, [*path, target])
        done.add(module)

    done: set[str] = set()
    for module in sorted(graph):
        if module not in done:
            visit(module, [module])
    assert cycles == []


def test_the_base_package_imports_neither_patch_package_nor_the_test_kit():
    leaks = {
        module: sorted(i for i in imports(path, module) if i.split(".")[0] in {*PRODUCT[1:], TEST_KIT})
        for module, path in modules("scalar_scales").items()
    }
    assert {module: found for module, found in leaks.items() if found} == {}


@pytest.mark.parametrize("package", PRODUCT[1:])
def test_a_patch_package_imports_neither_the_other_nor_the_test_kit(package):
    others = {*PRODUCT[1:], TEST_KIT} - {package}
    leaks = {
        module: sorted(i for i in imports(path, module) if i.split(".")[0] in others)
        for module, path in modules(package).items()
    }
    assert {module: found for module, found in leaks.items() if found} == {}


@pytest.mark.parametrize("folder", ["tests", "scripts", "benchmarks", "testkit"])
def test_nothing_edits_sys_path_to_find_code(folder):
    edits = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != Path(__file__).resolve() and any(f"sys.path.{edit}" in path.read_text() for edit in EDITS)
    ]
    assert edits == []


PROCESS_MODULES = ("multiprocessing", "subprocess", "concurrent.futures.process")
PROCESS_CALLS = ("fork", "forkpty", "spawnv", "spawnve", "posix_spawn", "posix_spawnp", "system", "popen", "execv")
STARTS_GIT = {"scalar_scales.sources.staged": ["subprocess"]}
"""``check --staged`` reads git's staging area with git's read-only commands (its index, objects and packs have no
other reader): the one module that starts a process, and only git."""


def test_the_base_package_runs_in_one_process():
    """``check`` and ``migrate`` start no process (but git, for ``check --staged``): no module imports a way to
    start one, or calls ``os`` to."""
    starting: dict[str, list[str]] = {}
    for name, path in modules("scalar_scales").items():
        tree = ast.parse(path.read_text())
        found = [i for i in imports(path, name) if i.startswith(PROCESS_MODULES)]
        found += [
            f"os.{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and node.attr in PROCESS_CALLS
        ]
        if found:
            starting[name] = sorted(found)
    assert starting == STARTS_GIT
