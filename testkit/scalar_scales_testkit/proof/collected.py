"""A pytest plugin the test command loads in every suite (``PYTEST_PLUGINS``): it writes each test it collects,
and how it ended, to ``$SCALAR_SCALES_MANIFEST_OUT`` as JSON lines, for the manifest comparison.

Only this project's tests are written (those of a root folder holding the ``scalar_scales`` package): a suite
that runs another project's test suite (compressed-tensors', by scripts/verify_upstream_patch.sh) loads the
plugin there too, and those tests are not ours.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

_outcomes: dict[str, str] = {}


def _ours(config: pytest.Config) -> bool:
    ours = (Path(config.rootpath) / "scalar_scales" / "__init__.py").is_file()
    return ours and bool(os.environ.get("SCALAR_SCALES_MANIFEST_OUT"))


def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:
        _outcomes.setdefault(item.nodeid, "not run")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        _outcomes[report.nodeid] = "failed"
    elif report.skipped and _outcomes.get(report.nodeid) != "failed":
        _outcomes[report.nodeid] = "skipped"
    elif report.when == "call" and report.passed and _outcomes.get(report.nodeid) not in ("failed", "skipped"):
        _outcomes[report.nodeid] = "passed"


def pytest_unconfigure(config: pytest.Config) -> None:
    if not _ours(config) or not _outcomes:
        return
    group = os.environ.get("SCALAR_SCALES_MANIFEST_GROUP", "")
    with open(os.environ["SCALAR_SCALES_MANIFEST_OUT"], "a") as f:
        for nodeid, outcome in _outcomes.items():
            f.write(json.dumps({"group": group, "id": nodeid, "outcome": outcome}) + "\n")
