"""The corpus of failures users reported (scalar_scales_testkit.reported): each defect's replica is found by its
rule with its severity, its control is clean, a consumer's bug's replica is clean, and a defect of a class no rule
finds yet is a strict expected failure, which fails the run once a rule finds it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from safetensors import safe_open

from scalar_scales_testkit.cli import run_cli_in_process
from scalar_scales_testkit.replicas import Replica, write_replica
from scalar_scales_testkit.reported import (
    ISSUE_41_THREADS,
    MISSED_CLASSES,
    REPORTED,
    Caught,
    Miss,
    ReportedFailure,
    document,
)

ROOT = Path(__file__).resolve().parents[3]
RANK = {"info": 0, "warning": 1, "error": 2}


def _findings(replica: Replica, folder: Path) -> tuple[list[dict[str, Any]], int]:
    result = run_cli_in_process("check", write_replica(replica, folder), "--json")
    return json.loads(result.stdout)["findings"], result.returncode


def _defect(case: ReportedFailure) -> Replica:
    replica = case.replica()
    assert case.defect is not None
    case.defect(replica)
    return replica


CAUGHT = [pytest.param(case, id=case.id) for case in REPORTED if isinstance(case.expected, Caught)]
MISSED = [
    pytest.param(
        case,
        id=case.id,
        marks=pytest.mark.xfail(
            raises=AssertionError,
            strict=True,
            reason=f"known miss, no rule yet for {MISSED_CLASSES[case.expected.kind]}",
        ),
    )
    for case in REPORTED
    if isinstance(case.expected, Miss)
]
CONTROLS = [pytest.param(case, id=case.id) for case in REPORTED if case.defect is not None]
CONSUMER_BUGS = [pytest.param(case, id=case.id) for case in REPORTED if case.expected is None]


@pytest.mark.parametrize("case", CAUGHT)
def test_a_reported_defect_is_found_by_its_rules_with_their_severity(tmp_path, case):
    assert isinstance(case.expected, Caught)
    findings, returncode = _findings(_defect(case), tmp_path)
    assert {(f["code"], f["severity"]) for f in findings} == set(case.expected.codes.items())
    assert case.expected.names in {f["tensor"] for f in findings}
    assert returncode == (1 if "error" in case.expected.codes.values() else 0)


@pytest.mark.parametrize("case", MISSED)
def test_a_reported_defect_of_a_class_no_rule_covers_yet_is_found_once_one_does(tmp_path, case):
    assert isinstance(case.expected, Miss)
    findings, _ = _findings(_defect(case), tmp_path)
    found = [f for f in findings if RANK[f["severity"]] >= RANK[case.expected.severity]]
    assert found and (case.expected.names is None or case.expected.names in {f["tensor"] for f in found})


@pytest.mark.parametrize("case", CONTROLS)
def test_the_replica_without_the_defect_is_clean(tmp_path, case):
    assert _findings(case.replica(), tmp_path) == ([], 0)


@pytest.mark.parametrize("case", CONSUMER_BUGS)
def test_a_consumer_bugs_replica_is_clean(tmp_path, case):
    assert _findings(case.replica(), tmp_path) == ([], 0)


def test_every_replica_is_read_by_the_reference_safetensors_reader(tmp_path):
    """Replicas and defects alike are real safetensors files: the reference reader lists every tensor."""
    for n, case in enumerate(REPORTED):
        replicas = [case.replica()] + ([_defect(case)] if case.defect is not None else [])
        for m, replica in enumerate(replicas):
            folder = tmp_path / f"{n}-{m}"
            write_replica(replica, folder)
            for shard, tensors in replica.shards.items():
                with safe_open(folder / shard, framework="numpy") as f:
                    assert sorted(f.keys()) == sorted(t.name for t in tensors)


def test_the_corpus_is_fifteen_threads_or_more_beyond_those_issue_41_names():
    threads = [case.thread for case in REPORTED]
    assert len(set(threads)) == len(threads) >= 15
    assert not ISSUE_41_THREADS & set(threads)


def test_each_case_has_what_the_doc_says_of_it():
    """A defect has its edit and expectation; a consumer's bug has neither."""
    for case in REPORTED:
        assert case.shows and case.inferred
        assert (case.defect is None) == (case.expected is None) == (case.edit == "")


def test_docs_reported_failures_is_generated_from_the_table():
    assert (ROOT / "docs" / "reported-failures.md").read_text() == document(), (
        "docs/reported-failures.md is stale: regenerate it with `python scripts/reported_failures.py`"
    )
