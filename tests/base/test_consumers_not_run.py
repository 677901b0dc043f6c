"""The consumers the round trip does not run (TensorRT-LLM, MAX, llama.cpp's converter): what docs/compatibility.md
and ``scalar-scales rule CODE`` say of them is the package's data (scalar_scales/consumers/read.py), and each
statement there names where it comes from."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scalar_scales.consumers import READ_CONSUMERS, consequences
from scalar_scales.consumers.read import section
from scalar_scales.doctor import RULES
from scalar_scales_testkit.cli import run_cli_in_process

ROOT = Path(__file__).resolve().parents[2]


def test_the_compatibility_doc_holds_the_section_the_data_makes() -> None:
    document = (ROOT / "docs" / "compatibility.md").read_text()
    assert "\n".join(section()) + "\n" in document, (
        "stale: run `python scripts/compatibility_matrix.py --consumers-not-run`"
    )


@pytest.mark.parametrize("consumer", READ_CONSUMERS, ids=lambda consumer: consumer.consumer)
def test_each_consumer_names_the_commit_file_and_function_it_was_read_from(consumer) -> None:
    assert consumer.how in ("read, not run", "observed")
    assert consumer.sources
    for source in consumer.sources:
        assert re.fullmatch(r"[0-9a-f]{40}", source.commit), source
        assert source.repository.count("/") == 1 and source.path and source.function


@pytest.mark.parametrize("consumer", READ_CONSUMERS, ids=lambda consumer: consumer.consumer)
def test_each_consequence_names_a_rule_of_check(consumer) -> None:
    assert {name for name, _ in consumer.by_rule} <= {rule.name for rule in RULES.values()}


def test_rule_prints_what_each_consumer_not_run_does_with_its_defect() -> None:
    result = run_cli_in_process("rule", "NV303")
    assert result.returncode == 0
    for consumer, text in consequences(RULES["NV303"].name):
        assert f"- {consumer.consumer} ({consumer.how}): {text}." in result.stdout.splitlines()


def test_rule_adds_nothing_where_no_consumer_not_run_shows_the_defect() -> None:
    assert not consequences(RULES["NV501"].name)
    result = run_cli_in_process("rule", "NV501")
    assert "round trip does not run" not in result.stdout


def test_rule_as_json_gives_each_consumer_not_run_s_consequence() -> None:
    data = json.loads(run_cli_in_process("rule", "NV303", "--output-format", "json").stdout)
    assert [(entry["consumer"], entry["how"], entry["consequence"]) for entry in data["consumers_not_run"]] == [
        (consumer.consumer, consumer.how, text) for consumer, text in consequences(RULES["NV303"].name)
    ]
