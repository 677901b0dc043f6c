"""Fixtures for the round trip: the artifacts that scripts/make_artifacts.py wrote, handed over as files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from scalar_scales_testkit.roundtrip import MIGRATED, Artifact, all_artifacts, artifacts_root


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.roundtrip)


GROUPINGS: dict[str, Callable[[Artifact], tuple[str, ...]]] = {
    "family": lambda a: (a.producer, a.scheme),
    "across_producers": lambda a: (a.scheme, a.form),
}
"""Fixtures that take a list of artifacts: a producer's four forms of one scheme; one scheme and form, from
every producer."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``artifact`` (each artifact), ``migrated`` (each migrated one) and the ``GROUPINGS``."""
    wanted = [name for name in ("artifact", "migrated", *GROUPINGS) if name in metafunc.fixturenames]
    if not wanted:
        return
    found = all_artifacts(artifacts_root())
    for name in wanted:
        if name in GROUPINGS:
            groups: dict[tuple[str, ...], list[Artifact]] = {}
            for artifact in found:
                groups.setdefault(GROUPINGS[name](artifact), []).append(artifact)
            metafunc.parametrize(name, list(groups.values()), ids=["-".join(key) for key in groups])
        else:
            chosen = found if name == "artifact" else [a for a in found if a.form in MIGRATED]
            metafunc.parametrize(name, chosen, ids=[a.id for a in chosen])


@pytest.fixture(scope="session")
def bf16_dir() -> Path:
    return artifacts_root() / "bf16"
