"""What ``scalar-scales check`` says of the engines observed not to load a checkpoint, rendered from the package's
observations (``scalar_scales.consumers``, generated from the round trip) rather than pinned: a test of something
other than the refusals still sees every line ``check`` prints, and holds whatever the next round trip observes.

The refusals themselves, which consumer for which checkpoint and how a line says it, are pinned against
``OBSERVED`` in tests/base/doctor/test_engines.py; these helpers lean on :func:`scalar_scales.consumers.refusals`
for the rest."""

from __future__ import annotations

import os

from scalar_scales.consumers import Refusal, refusals
from scalar_scales.scan import scan_shards
from scalar_scales.sources import open_checkpoint

__all__ = ["not_loaded_lines", "observed_not_to_load", "refusals_of", "refused"]


def refusals_of(checkpoint: str | os.PathLike[str]) -> list[Refusal]:
    """The engines, as released, observed not to load ``checkpoint`` as it is on disk now."""
    return refusals(scan_shards(open_checkpoint(checkpoint)))


def refused(checkpoint: str | os.PathLike[str]) -> bool:
    """An engine was observed not to load it: what ``--strict`` fails."""
    return bool(refusals_of(checkpoint))


def not_loaded_lines(checkpoint: str | os.PathLike[str]) -> list[str]:
    """The text report's ``Not loaded by ...`` lines, before its summary line (and all ``--quiet`` prints of a
    checkpoint without findings)."""
    return [f"Not loaded by {refusal}" for refusal in refusals_of(checkpoint)]


def observed_not_to_load(checkpoint: str | os.PathLike[str]) -> str:
    """What the summary line ends with where an engine refuses it (`` Observed not to load it: A, B.``); empty
    where none does."""
    consumers = [refusal.consumer for refusal in refusals_of(checkpoint)]
    return f" Observed not to load it: {', '.join(consumers)}." if consumers else ""
