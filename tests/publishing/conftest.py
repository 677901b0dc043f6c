"""The publishing environment's tests (scripts/envs.sh publishing: no torch, pre-commit and jsonschema): the
pre-commit hook, the GitHub Action's steps, the schemas of ``check``'s JSON and SARIF, and the base install as a
checkpoint publisher's CI has it. Elsewhere they are skipped: the other environments lack these tools."""

from __future__ import annotations

import pytest

pytest.importorskip("pre_commit", reason="publishing tests run in the publishing environment")
pytest.importorskip("jsonschema", reason="publishing tests run in the publishing environment")
