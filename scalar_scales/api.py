"""The library: ``check`` and ``migrate`` as calls, for a pipeline that runs in Python (a producer's script that
quantizes, then checks and migrates what it wrote), with the command line's semantics, since the command is built
on them.

A checkpoint that cannot be read, or that ``migrate`` refuses, raises
:class:`~scalar_scales.errors.CheckpointError` (its message is the command's
one line, naming the file and the problem); a selection of rules that names
no rule, or leaves none, raises :class:`ValueError`. Nothing is printed.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from scalar_scales.doctor import CheckReport, diagnose, selected_codes
from scalar_scales.doctor.settings import ModuleIgnores
from scalar_scales.errors import CheckpointError
from scalar_scales.sources import OpenedCheckpoint, open_checkpoint
from scalar_scales.sources.hub_address import hub_author

if TYPE_CHECKING:
    from scalar_scales.files.header_edit import Layout
    from scalar_scales.migration import MigrationReport

__all__ = ["check", "check_opened", "migrate"]


def check(
    path: str | os.PathLike[str],
    *,
    select: str | Iterable[str] = (),
    ignore: str | Iterable[str] = (),
    include: str | Sequence[str] = (),
    strict: bool = False,
    exit_zero: bool = False,
) -> CheckReport:
    """Apply the rules to the checkpoint at ``path`` (a folder, a ``.safetensors`` file or ``hf://ORG/NAME``), as
    ``scalar-scales check`` does: the report's ``findings`` and ``exit_code`` are the command's.

    ``select`` and ``ignore`` take codes or prefixes (``"NV1"``, ``["NV101", "NV3"]``), as ``--select`` and
    ``--ignore`` do; ``include`` globs name more per-tensor scales (``--include``).
    """
    codes = selected_codes(_listed(select), _listed(ignore), named=("select=", "extend_select=", "ignore="))
    if isinstance(path, str) and hub_author(path) is not None:
        raise CheckpointError(path, "check takes one checkpoint; hf://ORG, every model of an author, is the command's")
    opened = open_checkpoint(path)
    return check_opened(opened, codes=codes, include=_listed(include), strict=strict, exit_zero=exit_zero)


def check_opened(
    opened: OpenedCheckpoint,
    *,
    codes: Collection[str],
    include: Sequence[str] = (),
    strict: bool = False,
    exit_zero: bool = False,
    module_ignores: ModuleIgnores | None = None,
) -> CheckReport:
    """The report of the rules ``codes`` on a checkpoint already opened (a folder, the Hub, git's staging area),
    less the findings ``module_ignores`` (a configuration file's ``per-module-ignores``) drops, which it counts."""
    fetched = None
    if opened.hub is not None:  # the Hub's source, imported only where a check reads the Hub
        from scalar_scales.sources.hub import HubShards

        fetched = opened.source if isinstance(opened.source, HubShards) else None
    diagnosis = diagnose(opened, include=include, codes=codes)
    ignored = 0
    if module_ignores:
        kept, ignored = module_ignores.split(diagnosis.findings)
        diagnosis = replace(diagnosis, findings=kept)
    return CheckReport(
        diagnosis, strict, fetched, exit_zero=exit_zero, include=tuple(include), ignored_by_config=ignored
    )


def migrate(
    path: str | os.PathLike[str],
    *,
    to: Layout = "scalar",
    dry_run: bool = False,
    include: str | Sequence[str] = (),
    materialize: bool = False,
) -> MigrationReport:
    """Put the checkpoint at ``path`` (a local folder or ``.safetensors`` file) into layout ``to`` (``"scalar"``:
    0-D scales and ``format_version`` 2; ``"legacy"``: (1,) and no marker), as ``scalar-scales migrate`` does:
    decided and checked whole before the first write, crash-safe and idempotent. ``dry_run`` changes nothing and
    says what would change; ``materialize`` replaces linked shards (a Hugging Face cache's) with edited copies."""
    from scalar_scales.migration import migrate_checkpoint  # a check, the command's usual call, needs none of it

    return migrate_checkpoint(path, to=to, dry_run=dry_run, include=_listed(include), materialize=materialize)


def _listed(values: str | Iterable[str]) -> list[str]:
    """``values`` as a list; one string is one entry (``select="NV1"``), not its characters."""
    return [values] if isinstance(values, str) else list(values)
