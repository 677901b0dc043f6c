"""Fixtures for the round trip: the artifacts that scripts/make_artifacts.py wrote, handed over as files.

"""

from __future__ import annotations

from pathlib import Path

import pytest
from roundtrip_support import MIGRATED, Artifact, all_artifacts, artifacts_root


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.roundtrip)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``artifact`` (each artifact), ``migrated`` (each migrated one), ``family`` (a producer's four
    forms of one scheme) and ``across_producers`` (one scheme and form, from every producer)."""
    wanted = [name for name in ("artifact", "migrated", "family", "across_producers") if name in metafunc.fixturenames]
    if not wanted:
        return
    found = all_artifacts(artifacts_root())
    groups: dict[str, list] = {
        "artifact": found,
        "migrated": [a for a in found if a.form in MIGRATED],
        "family": group(found, lambda a: (a.producer, a.scheme)),
        "across_producers": group(found, lambda a: (a.scheme, a.form)),
    }
    for name in wanted:
        values = groups[name]
        ids = [v.id if isinstance(v, Artifact) else "-".join(key_of(name, v[0])) for v in values]
        metafunc.parametrize(name, values, ids=ids)


def key_of(name: str, artifact: Artifact) -> tuple[str, ...]:
    return (artifact.producer, artifact.scheme) if name == "family" else (artifact.scheme, artifact.form)


def group(artifacts: list[Artifact], key) -> list[list[Artifact]]:
    groups: dict[tuple[str, ...], list[Artifact]] = {}
    for artifact in artifacts:
        groups.setdefault(key(artifact), []).append(artifact)
    return list(groups.values())


@pytest.fixture(scope="session")
def bf16_dir() -> Path:
    return artifacts_root() / "bf16"
