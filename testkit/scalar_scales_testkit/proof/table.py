"""The table of environments and suites (scripts/suites.toml), read and checked before anything runs.

Standard library only: the test command reads it with the machine's Python, before any environment exists.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["PROJECT", "TABLE", "Environment", "Suite", "Table", "TableError", "load"]

PROJECT = Path(__file__).resolve().parents[3]
"""The checkout (testkit/scalar_scales_testkit/proof/ lives three folders below its root)."""
TABLE = PROJECT / "scripts" / "suites.toml"

ROLES = ("producer", "transformers", "vllm", "sglang", "exporter", "publishing")
NEW = ("python", "torch")
ENVIRONMENT_KEYS = {"summary", "from", "uninstall", "no-deps", "install", "overlay", "stand-ins", "release", "role"}
SUITE_KEYS = {"name", "env", "pytest", "run", "reads", "writes", "cache", "full", "seconds", "group"}


class TableError(Exception):
    """The table is not one the test command can run: it names the entry and the problem."""


@dataclass(frozen=True)
class Environment:
    """One virtual environment: how it is built, and the upstream release it stands for."""

    name: str
    summary: str
    base: str
    install: tuple[str, ...] = ()
    no_deps: tuple[str, ...] = ()
    uninstall: tuple[str, ...] = ()
    overlay: str | None = None
    stand_ins: tuple[str, ...] = ()
    release: str | None = None
    role: str = ""

    @property
    def is_new(self) -> bool:
        return self.base in NEW


@dataclass(frozen=True)
class Suite:
    """One unit of the test command: a pytest run, or a command, in one environment."""

    name: str
    env: str
    pytest: tuple[str, ...] = ()
    run: tuple[tuple[str, ...], ...] = ()
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    cache: tuple[str, ...] | None = None
    full: bool = False
    seconds: float = 60.0
    group: str = ""

    @property
    def is_pytest(self) -> bool:
        return bool(self.pytest)

    @property
    def cached(self) -> bool:
        """Its output is deterministic and kept in the cache: it says what code made it (``cache``)."""
        return self.cache is not None

    @property
    def manifest_group(self) -> str:
        """The name its tests are listed under in the manifest: its environment's, unless it says otherwise."""
        return self.group or self.env

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")[:80]


@dataclass(frozen=True)
class Table:
    torch_pin: str
    requirements: dict[str, tuple[str, ...]]
    environments: dict[str, Environment]
    suites: tuple[Suite, ...] = field(default=())

    def chain(self, name: str) -> list[Environment]:
        """``name``'s environment and those it is copied from, the first built first."""
        found: list[Environment] = []
        while name not in NEW:
            environment = self.environments[name]
            found.insert(0, environment)
            name = environment.base
        return found

    def expand(self, requirements: tuple[str, ...]) -> tuple[str, ...]:
        """Requirements with each ``@group`` replaced by the table's ``[requirements]`` group."""
        out: list[str] = []
        for item in requirements:
            out.extend(self.requirements[item[1:]] if item.startswith("@") else (item,))
        return tuple(out)

    def spec(self, name: str) -> str:
        """What ``name`` is built from, as one line: an environment is reused while its spec is unchanged."""
        parts = []
        for environment in self.chain(name):
            base = f"{self.torch_pin} " if environment.base == "torch" else ""
            steps = [
                f"{environment.name}: {base}from {environment.base}",
                *(f"-{p}" for p in environment.uninstall),
                *(f"{p} --no-deps" for p in environment.no_deps),
                *self.expand(environment.install),
                *(f"stand-in {p}" for p in environment.stand_ins),
            ]
            parts.append(", ".join(steps))
        return "; ".join(parts)

    def releases(self, role: str) -> list[str]:
        """The releases the environments of ``role`` stand for, in the table's order."""
        return [e.release for e in self.environments.values() if e.role == role and e.release]

    def selected(self, *, full: bool) -> tuple[Suite, ...]:
        return tuple(s for s in self.suites if full or not s.full)


def _strings(where: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TableError(f"{where}: expected a list of strings")
    return tuple(value)


def _environment(name: str, raw: dict[str, object]) -> Environment:
    unknown = set(raw) - ENVIRONMENT_KEYS
    if unknown:
        raise TableError(f"environment {name}: unknown keys {sorted(unknown)}")
    for key in ("summary", "from"):
        if not isinstance(raw.get(key), str):
            raise TableError(f"environment {name}: '{key}' must be a string")
    role = raw.get("role", "")
    if role not in ROLES:
        raise TableError(f"environment {name}: role {role!r} is not one of {', '.join(ROLES)}")
    release = raw.get("release")
    if release is not None and (not isinstance(release, str) or len(release.split()) != 2):
        raise TableError(f"environment {name}: release must be 'package version'")
    overlay = raw.get("overlay")
    if overlay is not None and not isinstance(overlay, str):
        raise TableError(f"environment {name}: overlay must be a requirement")
    return Environment(
        name=name,
        summary=str(raw["summary"]),
        base=str(raw["from"]),
        install=_strings(f"environment {name}: install", raw.get("install", [])),
        no_deps=_strings(f"environment {name}: no-deps", raw.get("no-deps", [])),
        uninstall=_strings(f"environment {name}: uninstall", raw.get("uninstall", [])),
        overlay=overlay,
        stand_ins=_strings(f"environment {name}: stand-ins", raw.get("stand-ins", [])),
        release=release,
        role=str(role),
    )


def _suite(raw: dict[str, object], environments: dict[str, Environment]) -> Suite:
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise TableError(f"a suite without a name: {raw}")
    unknown = set(raw) - SUITE_KEYS
    if unknown:
        raise TableError(f"suite {name!r}: unknown keys {sorted(unknown)}")
    env = raw.get("env")
    if env not in environments:
        raise TableError(f"suite {name!r}: no environment {env!r}")
    pytest_args = _strings(f"suite {name!r}: pytest", raw.get("pytest", []))
    run_raw = raw.get("run", [])
    if isinstance(run_raw, list) and run_raw and all(isinstance(c, list) for c in run_raw):
        commands = tuple(_strings(f"suite {name!r}: run", c) for c in run_raw)
    else:
        commands = (_strings(f"suite {name!r}: run", run_raw),) if run_raw else ()
    if bool(pytest_args) == bool(commands):
        raise TableError(f"suite {name!r}: give 'pytest' or 'run', one of them")
    seconds = raw.get("seconds", 60)
    if not isinstance(seconds, int | float) or seconds <= 0:
        raise TableError(f"suite {name!r}: seconds must be a positive number")
    full = raw.get("full", False)
    if not isinstance(full, bool):
        raise TableError(f"suite {name!r}: full must be true or false")
    return Suite(
        name=name,
        env=str(env),
        pytest=pytest_args,
        run=commands,
        reads=_strings(f"suite {name!r}: reads", raw.get("reads", [])),
        writes=_strings(f"suite {name!r}: writes", raw.get("writes", [])),
        cache=_strings(f"suite {name!r}: cache", raw["cache"]) if "cache" in raw else None,
        full=full,
        seconds=float(seconds),
        group=str(raw.get("group", "")),
    )


def parse(text: str, where: str = "suites.toml") -> Table:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise TableError(f"{where}: {error}") from None
    torch_pin = raw.get("torch", {}).get("pin")
    if not isinstance(torch_pin, str):
        raise TableError(f"{where}: [torch] pin is missing")
    requirements = {k: _strings(f"requirements.{k}", v) for k, v in raw.get("requirements", {}).items()}
    environments = {name: _environment(name, value) for name, value in raw.get("environments", {}).items()}
    for environment in environments.values():
        if environment.base not in NEW and environment.base not in environments:
            raise TableError(f"environment {environment.name}: from {environment.base!r}, which is no environment")
        for item in (*environment.install, *environment.no_deps):
            if item.startswith("@") and item[1:] not in requirements:
                raise TableError(f"environment {environment.name}: no requirements group {item}")
    suites = tuple(_suite(entry, environments) for entry in raw.get("suites", []))
    names = [s.name for s in suites]
    if len(set(names)) != len(names):
        raise TableError(f"{where}: two suites with the same name")
    table = Table(torch_pin, requirements, environments, suites)
    for name in environments:
        seen: set[str] = set()
        current = name
        while current not in NEW:
            if current in seen:
                raise TableError(f"environment {name}: built from itself")
            seen.add(current)
            current = environments[current].base
    return table


def load(path: Path = TABLE) -> Table:
    return parse(path.read_text(), path.name)
