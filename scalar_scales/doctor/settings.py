"""``check``'s settings from a configuration file, found and layered as ruff finds and layers its own.

A repository that publishes checkpoints already configures ruff in its
``pyproject.toml``; it configures ``check`` beside it, in a
``[tool.scalar-scales]`` table, or in a ``scalar-scales.toml`` of top-level
keys (which wins where both are in one folder, as ``ruff.toml`` wins over
``pyproject.toml``). The file is the first found from the checked path
upward (from the current folder for a Hub repository); a ``pyproject.toml``
without the table is passed over, as ruff passes over one without
``[tool.ruff]``. ``--config`` names the file, ``--isolated`` ignores every
file, and the command line's options are layered over the file's
(:func:`resolve`).

Every key and value is checked when the file is read: a key this version
does not know, a value of the wrong type, a code that names no rule, a
pattern the matcher refuses, or a file that is not TOML is a
:class:`ConfigError`, one line naming the file and the key, so that a typo
never silently leaves a rule on or off.

``tomllib`` (Python 3.11 and later, which the package requires) is imported
only where a file is read: a check without one never pays for it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from scalar_scales.doctor.catalogue import RULES, codes_matching, selected_codes
from scalar_scales.doctor.matching import fnmatch_pattern
from scalar_scales.doctor.patterns import PatternError, PatternSet
from scalar_scales.doctor.report import DEFAULT_FORMAT, OUTPUT_FORMATS
from scalar_scales.doctor.rules import Finding

__all__ = [
    "CONFIG_NAME",
    "KEYS",
    "PYPROJECT",
    "ConfigError",
    "FileSettings",
    "ModuleIgnores",
    "Settings",
    "find_config",
    "read_config",
    "resolve",
]

CONFIG_NAME = "scalar-scales.toml"
PYPROJECT = "pyproject.toml"
TABLE = "scalar-scales"
"""The table of ``pyproject.toml``'s ``[tool]`` that holds the settings."""

KEYS = ("select", "ignore", "per-module-ignores", "strict", "output-format")
"""Every key a configuration file may set."""


class ConfigError(ValueError):
    """A configuration file that cannot be read, or one of whose keys is wrong: one line naming the file, the key
    and the problem."""


@dataclass(frozen=True)
class ModuleIgnores:
    """``per-module-ignores``: for each pattern, the codes whose findings are dropped where a tensor's name, or its
    module's (the name before its last dot), matches it. A pattern is ``re:`` and a regular expression, matched as
    compressed-tensors matches a config's ``re:`` targets (``re.match``), or else a wildcard, as ``--include``'s
    (``fnmatch``'s, case-sensitively); both through the doctor's one matcher (:mod:`.patterns`), in time linear in
    the name."""

    entries: tuple[tuple[str, frozenset[str]], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.entries)

    def split(self, findings: Iterable[Finding]) -> tuple[list[Finding], int]:
        """The findings kept, and how many were dropped."""
        if not self.entries:
            return list(findings), 0
        patterns = PatternSet([_regex(pattern) for pattern, _ in self.entries])
        codes = [codes for _, codes in self.entries]
        kept: list[Finding] = []
        dropped = 0
        for finding in findings:
            tensor = finding.tensor
            if tensor is not None:
                matched = patterns.matching(tensor) | patterns.matching(tensor.rpartition(".")[0])
                if any(finding.rule.code in codes[index] for index in matched):
                    dropped += 1
                    continue
            kept.append(finding)
        return kept, dropped

    def text(self) -> str:
        return "; ".join(f"{pattern} = {', '.join(sorted(codes))}" for pattern, codes in self.entries) or "none"


def _regex(pattern: str) -> str:
    return pattern.removeprefix("re:") if pattern.startswith("re:") else fnmatch_pattern(pattern)


@dataclass(frozen=True)
class FileSettings:
    """What one configuration file sets (None: the key is not in it)."""

    path: str
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] | None = None
    per_module_ignores: ModuleIgnores | None = None
    strict: bool | None = None
    output_format: str | None = None


def find_config(start: str) -> FileSettings | None:
    """The settings of the configuration file nearest ``start`` (a file's folder, or the folder), looking upward:
    in each folder ``scalar-scales.toml``, then a ``pyproject.toml`` with a ``[tool.scalar-scales]`` table."""
    folder = os.path.abspath(start)
    if not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    while True:
        candidate = os.path.join(folder, CONFIG_NAME)
        if os.path.isfile(candidate):
            return read_config(candidate)
        candidate = os.path.join(folder, PYPROJECT)
        if os.path.isfile(candidate) and (table := _tool_table(_load(candidate))) is not None:
            return _settings(candidate, table, _TOOL_PREFIX)
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def read_config(path: str) -> FileSettings:
    """The settings of the file at ``path``: a ``pyproject.toml``'s ``[tool.scalar-scales]`` table (none: nothing
    set), or any other file's top-level keys."""
    document = _load(path)
    if os.path.basename(path) != PYPROJECT:
        return _settings(path, document, "")
    table = _tool_table(document)
    return _settings(path, {} if table is None else table, _TOOL_PREFIX)


_TOOL_PREFIX = f"tool.{TABLE}."
"""How a ``pyproject.toml`` names the table's keys in a refusal."""


def _tool_table(document: dict[str, Any]) -> object:
    """A ``pyproject.toml``'s ``[tool.scalar-scales]``, as it holds it (a table, or what :func:`_settings` refuses);
    None where it has none."""
    tool = document.get("tool")
    return tool.get(TABLE) if isinstance(tool, dict) else None


def _load(path: str) -> dict[str, Any]:
    import tomllib  # only where a file is read

    try:
        with open(path, "rb") as file:
            return tomllib.load(file)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except ValueError as exc:  # tomllib.TOMLDecodeError, or bytes that are not UTF-8
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def _settings(path: str, table: object, prefix: str) -> FileSettings:
    """The keys of ``table``, each checked (``prefix``: how the file names the table's keys)."""

    def refuse(key: str, problem: str) -> ConfigError:
        return ConfigError(f"{path}: {prefix}{key}: {problem}")

    if not isinstance(table, dict):
        raise ConfigError(f"{path}: {prefix.rstrip('.')}: must be a table")
    for key in table:
        if key not in KEYS:
            import difflib  # only for an unknown key

            near = difflib.get_close_matches(str(key), KEYS, n=1)
            hint = f"did you mean {near[0]}?" if near else f"the keys are {', '.join(KEYS)}"
            raise refuse(key, f"unknown key; {hint}")
    settings: dict[str, Any] = {}
    for key in ("select", "ignore"):
        if key in table:
            settings[key] = tuple(_codes(table[key], lambda problem, key=key: refuse(key, problem)))
    if "per-module-ignores" in table:
        settings["per_module_ignores"] = _module_ignores(table["per-module-ignores"], refuse)
    if "strict" in table:
        if not isinstance(table["strict"], bool):
            raise refuse("strict", f"must be true or false, not {table['strict']!r}")
        settings["strict"] = table["strict"]
    if "output-format" in table:
        value = table["output-format"]
        if value not in OUTPUT_FORMATS:
            raise refuse("output-format", f"must be one of {', '.join(OUTPUT_FORMATS)}, not {value!r}")
        settings["output_format"] = value
    return FileSettings(path, **settings)


def _codes(value: object, refuse: Any) -> list[str]:
    """A list of rule codes or prefixes, each naming a rule."""
    if not isinstance(value, list) or not all(isinstance(entry, str) for entry in value):
        raise refuse(f'must be a list of rule codes (["NV1", "NV301"]), not {value!r}')
    if not value:  # an empty list would select every rule, or ignore none: never what it looks like
        raise refuse('names no rule: give at least one code (["NV1"]), or leave the key out')
    try:
        codes_matching(value)
    except ValueError as exc:
        raise refuse(str(exc)) from None
    return value


def _module_ignores(value: object, refuse: Any) -> ModuleIgnores:
    if not isinstance(value, dict):
        raise refuse("per-module-ignores", f"must be a table of patterns, each with a list of codes, not {value!r}")
    entries: list[tuple[str, frozenset[str]]] = []
    for pattern, codes in value.items():
        key = f'per-module-ignores."{pattern}"'
        _codes(codes, lambda problem, key=key: refuse(key, problem))
        try:
            PatternSet([_regex(pattern)])
        except PatternError as exc:
            raise refuse(key, f"not a pattern the matcher takes: {exc}") from None
        entries.append((pattern, codes_matching(codes)))
    return ModuleIgnores(tuple(entries))


@dataclass(frozen=True)
class Settings:
    """What ``check`` runs with, and where each setting came from (``--show-settings``): the command line, the
    file's path, or ``default``."""

    config: str | None
    codes: frozenset[str]
    codes_from: str
    per_module_ignores: ModuleIgnores
    per_module_ignores_from: str
    strict: bool
    strict_from: str
    output_format: str
    output_format_from: str

    @property
    def output_format_named(self) -> str:
        """The output format as a refusal names it: the option, where the command line gave it or nothing did; else
        the file's setting, with the file (a user who gave no option is not told they did)."""
        if self.output_format_from in (COMMAND_LINE, DEFAULT):
            return f"--output-format {self.output_format}"
        return f"output-format {self.output_format} ({self.output_format_from})"

    def lines(self) -> list[str]:
        """The settings, one a line: ``key: value (from)``, after the file read."""
        codes = "ALL" if self.codes == frozenset(RULES) else ", ".join(sorted(self.codes))
        return [
            f"config file: {self.config or 'none'}",
            f"select: {codes} ({self.codes_from})",
            f"per-module-ignores: {self.per_module_ignores.text()} ({self.per_module_ignores_from})",
            f"strict: {str(self.strict).lower()} ({self.strict_from})",
            f"output-format: {self.output_format} ({self.output_format_from})",
        ]


COMMAND_LINE = "command line"
DEFAULT = "default"


def resolve(
    file: FileSettings | None,
    *,
    select: Sequence[str] = (),
    extend_select: Sequence[str] = (),
    ignore: Sequence[str] = (),
    strict: bool = False,
    output_format: str | None = None,
) -> Settings:
    """The command line's options over ``file``'s, as ruff layers them: ``--select`` replaces the file's selection
    (its ``ignore`` too), ``--extend-select`` adds to it and ``--ignore`` takes from it; ``--strict`` and
    ``--output-format``, where given, win. A selection that is wrong is a :class:`ValueError` (the command
    line's) or a :class:`ConfigError` (the file's)."""
    start: frozenset[str] | None = None
    codes_from = DEFAULT
    if file is not None and (file.select is not None or file.ignore is not None):
        start = selected_codes(file.select or ()) - codes_matching(file.ignore or ())
        if not start:
            raise ConfigError(
                f"{file.path}: select and ignore: together they leave no rule to apply, and a check of no rule "
                "would pass any checkpoint"
            )
        codes_from = file.path
    if select or extend_select or ignore:
        codes_from = COMMAND_LINE if select or start is None else f"{file.path if file else ''} and command line"
    codes = selected_codes(select, ignore, extend_select=extend_select, start=start)
    ignores = file.per_module_ignores if file is not None else None
    file_strict = file.strict if file is not None else None
    file_format = file.output_format if file is not None else None
    path = file.path if file is not None else ""
    return Settings(
        config=file.path if file is not None else None,
        codes=codes,
        codes_from=codes_from,
        per_module_ignores=ignores or ModuleIgnores(),
        per_module_ignores_from=path if ignores is not None else DEFAULT,
        strict=strict or bool(file_strict),
        strict_from=COMMAND_LINE if strict else (path if file_strict is not None else DEFAULT),
        output_format=output_format or file_format or DEFAULT_FORMAT,
        output_format_from=COMMAND_LINE if output_format else (path if file_format is not None else DEFAULT),
    )
