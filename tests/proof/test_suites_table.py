"""The test command's table (scripts/suites.toml): every environment and suite, from which the environments are
built, the suites scheduled, the README's list of environments and the releases the matrix must show."""

from __future__ import annotations

import pytest

from scalar_scales_testkit.proof.cache import Cache
from scalar_scales_testkit.proof.run import Run, graph
from scalar_scales_testkit.proof.table import TABLE, TableError, load, parse

NEW_RELEASE = """
[environments.producer-ct021]
summary = "the same, with compressed-tensors 0.21.0"
from = "producer"
no-deps = ["compressed-tensors==0.21.0"]
release = "compressed-tensors 0.21.0"
role = "producer"

[[suites]]
name = "artifacts, compressed-tensors 0.21.0"
env = "producer-ct021"
run = ["scripts/make_artifacts.py", "{artifacts}"]
reads = ["artifacts/bf16"]
writes = ["artifacts/ct-0.21.0"]
cache = ["compressed_tensors_patch"]

[[suites]]
name = "producer and round-trip tests, compressed-tensors 0.21.0"
env = "producer-ct021"
pytest = ["tests/producer", "tests/roundtrip/test_transformers.py"]
reads = ["artifacts"]
writes = ["results/round-trip"]
"""


def with_new_release() -> str:
    return TABLE.read_text() + NEW_RELEASE


def test_the_committed_table_is_valid_and_every_suite_runs_in_a_known_environment():
    table = load()
    assert table.suites and all(suite.env in table.environments for suite in table.suites)


def test_a_release_added_as_one_row_is_built_from_its_base_and_named_among_the_producers():
    table = parse(with_new_release())
    assert [e.name for e in table.chain("producer-ct021")] == ["producer", "producer-ct021"]
    assert "compressed-tensors==0.21.0 --no-deps" in table.spec("producer-ct021")
    assert table.releases("producer")[-1] == "compressed-tensors 0.21.0"


def test_a_release_added_as_one_row_is_scheduled_after_what_it_reads(tmp_path):
    table = parse(with_new_release())
    nodes = graph(Run(table, tmp_path, Cache(tmp_path / "cache"), []), table.suites)
    needs = nodes["producer and round-trip tests, compressed-tensors 0.21.0"].needs
    assert {
        "env:producer-ct021",
        "artifacts, compressed-tensors 0.21.0",
        "artifacts, compressed-tensors 0.19.0",
    } <= needs
    assert nodes["env:producer-ct021"].needs == {"env:producer"}


def test_the_readme_lists_every_environment_of_the_table():
    from scalar_scales_testkit.proof.readme import environment_list, readme_block

    assert readme_block() == environment_list(load())


def test_a_suite_reading_what_no_suite_writes_is_refused(tmp_path):
    table = parse(
        TABLE.read_text() + '\n[[suites]]\nname = "x"\nenv = "producer"\npytest = ["tests"]\nreads = ["nowhere"]\n'
    )
    with pytest.raises(SystemExit, match="reads nowhere, which no suite writes"):
        graph(Run(table, tmp_path, Cache(tmp_path / "cache"), []), table.suites)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ('[environments.x]\nsummary = "x"\nfrom = "nothing"\nrole = "producer"\n', "from 'nothing', which is no"),
        ('[environments.x]\nsummary = "x"\nfrom = "x"\nrole = "producer"\n', "built from itself"),
        ('[environments.x]\nsummary = "x"\nfrom = "torch"\nrole = "chef"\n', "role 'chef'"),
        ('[[suites]]\nname = "y"\nenv = "nowhere"\npytest = ["tests"]\n', "no environment 'nowhere'"),
        ('[[suites]]\nname = "y"\nenv = "producer"\n', "give 'pytest' or 'run'"),
        ('[[suites]]\nname = "y"\nenv = "producer"\npytest = ["tests"]\ncolour = 1\n', "unknown keys"),
    ],
)
def test_a_table_row_that_cannot_run_is_refused_naming_it(row, message):
    with pytest.raises(TableError, match=message):
        parse(TABLE.read_text() + "\n" + row)
