"""Build, once, and cache the virtual environments of the table; the project is installed in each (editable).

An environment is reused while the spec it was built from is unchanged: the spec is stored inside it, written
last, so an interrupted build is rebuilt. The project and its test kit are installed editable from the checkout
that asks, unless that checkout is already the one installed: a cache may serve several clones.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from scalar_scales_testkit.proof.table import PROJECT, Environment, Table

__all__ = ["VENVS", "EnvironmentError_", "build", "python_of"]

CACHE = Path(os.environ.get("SCALAR_SCALES_CACHE", Path.home() / ".cache" / "scalar-scales"))
VENVS = Path(os.environ.get("SCALAR_SCALES_VENVS", CACHE / "venvs"))
SPEC_FILE = ".scalar-scales-spec"
CONSTRAINT = ".torch-constraint"
PYTHON = os.environ.get("PYTHON", "python3.11")
NOISE = "is ignored: it is neither a file nor a directory"


class EnvironmentError_(Exception):
    """An environment could not be built: the step and pip's own last lines."""


def python_of(name: str) -> Path:
    return VENVS / name / "bin" / "python"


def _run(command: list[str], log: list[str]) -> None:
    environment = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    result = subprocess.run(command, capture_output=True, text=True, env=environment)
    output = [line for line in (result.stdout + result.stderr).splitlines() if NOISE not in line]
    log.extend(output)
    if result.returncode:
        tail = "\n".join(output[-20:])
        raise EnvironmentError_(f"{' '.join(command)} exited {result.returncode}:\n{tail}")


def _pip(name: str, log: list[str], *args: str) -> None:
    _run([str(python_of(name)), "-m", "pip", "install", "--quiet", "--progress-bar", "off", *args], log)


def _is_current(table: Table, name: str) -> bool:
    spec = VENVS / name / SPEC_FILE
    return spec.is_file() and spec.read_text() == table.spec(name)


def _site_packages(name: str) -> Path:
    out = subprocess.run(
        [str(python_of(name)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def _build_one(table: Table, environment: Environment, log: list[str]) -> None:
    name, target = environment.name, VENVS / environment.name
    shutil.rmtree(target, ignore_errors=True)
    VENVS.mkdir(parents=True, exist_ok=True)
    constraint = target / CONSTRAINT
    if environment.is_new:
        _run([PYTHON, "-m", "venv", str(target)], log)
        if environment.base == "torch":
            _pip(name, log, table.torch_pin)
            constraint.write_text(table.torch_pin + "\n")
    else:
        shutil.copytree(VENVS / environment.base, target, symlinks=True)
        (target / SPEC_FILE).unlink(missing_ok=True)
    constrained = ["-c", str(constraint)] if constraint.is_file() else []
    uninstall = [str(python_of(name)), "-m", "pip", "uninstall", "--quiet", "--yes", *environment.uninstall]
    if environment.uninstall and not environment.is_new:
        _run(uninstall, log)
    if environment.no_deps:
        _pip(name, log, "--no-deps", *environment.no_deps)
    if environment.install:
        _pip(name, log, *constrained, *table.expand(environment.install))
    if environment.uninstall and environment.is_new:
        # The registry's builds of these are CUDA-linked and break `import vllm.config` on a CPU torch.
        subprocess.run(uninstall, capture_output=True)


def _ensure_overlay(environment: Environment, log: list[str]) -> None:
    if environment.overlay is None:
        return
    package, version = environment.overlay.split("==")
    target = VENVS / environment.name / "overlays" / f"{package}-{version}"
    if (target / package.replace("-", "_")).is_dir():
        return
    shutil.rmtree(target, ignore_errors=True)
    _pip(environment.name, log, "--no-deps", "--target", str(target), environment.overlay)


def _install_stand_ins(environment: Environment, site: Path) -> None:
    for package in environment.stand_ins:
        shutil.rmtree(site / package, ignore_errors=True)
        shutil.copytree(PROJECT / "testkit" / "stubs" / package, site / package)


def _installed_from(site: Path) -> str | None:
    """The checkout the project is installed (editable) from in ``site``, if pip recorded one."""
    for dist in site.glob("scalar_scales-*.dist-info"):
        direct = dist / "direct_url.json"
        if direct.is_file():
            return str(json.loads(direct.read_text()).get("url", ""))
    return None


def _install_project(name: str, site: Path, log: list[str]) -> None:
    if _installed_from(site) == PROJECT.as_uri() and any(site.glob("scalar_scales_testkit-*.dist-info")):
        return
    _pip(name, log, "--no-deps", "--no-build-isolation", "-e", str(PROJECT), "-e", str(PROJECT / "testkit"))


def build(table: Table, name: str, log: list[str] | None = None) -> tuple[Path, bool]:
    """Build ``name`` (and what it is copied from) unless current; install the project. Return its folder and
    whether anything was built."""
    log = [] if log is None else log
    built = False
    for environment in table.chain(name):
        if not _is_current(table, environment.name):
            log.append(f"envs: building {environment.name} ({table.spec(environment.name)})")
            _build_one(table, environment, log)
            (VENVS / environment.name / SPEC_FILE).write_text(table.spec(environment.name))
            built = True
    environment = table.environments[name]
    _ensure_overlay(environment, log)
    site = _site_packages(name)
    _install_stand_ins(environment, site)
    _install_project(name, site, log)
    return VENVS / name, built
