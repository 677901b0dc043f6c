"""The rule catalogue: each rule one object, its reference generated from it (docs/rules.md, ``scalar-scales
rule``), and no module but the one that defines a rule naming its code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import scalar_scales
from scalar_scales.doctor import RULES, reference_document
from scalar_scales_testkit.cli import run_cli_in_process

DOCS = Path(__file__).parents[3] / "docs"
PACKAGE = Path(scalar_scales.__file__).parent


def test_docs_rules_md_is_what_the_catalogue_generates():
    assert (DOCS / "rules.md").read_text() == reference_document(), (
        "docs/rules.md is stale: regenerate it with `scalar-scales rule --all > docs/rules.md`"
    )


def test_rule_all_prints_the_reference_docs_rules_md_holds():
    result = run_cli_in_process("rule", "--all")
    assert (result.returncode, result.stdout) == (0, reference_document())


@pytest.mark.parametrize("code", RULES)
def test_rule_code_prints_that_rules_reference(code):
    rule = RULES[code]
    result = run_cli_in_process("rule", code.lower())
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[0] == f"### {code} {rule.name} ({rule.severity})"
    assert f"Effect: `{rule.effect}`" in lines[2]
    assert rule.explanation and rule.explanation in result.stdout


def test_an_unknown_rule_code_is_one_line_and_exit_2():
    result = run_cli_in_process("rule", "NV999")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "unknown rule code 'NV999'" in result.stderr


def test_rule_needs_a_code_or_all():
    for arguments in ((), ("--all", "NV101")):
        result = run_cli_in_process("rule", *arguments)
        assert result.returncode == 2 and result.stderr.count("\n") == 1


def test_every_rule_explains_itself_and_has_a_distinct_code_and_name():
    assert all(rule.explanation for rule in RULES.values())
    assert list(RULES) == sorted(RULES)
    assert len({rule.name for rule in RULES.values()}) == len(RULES)


def rule_codes_named(tree: ast.AST) -> list[tuple[int, str]]:
    """Every string constant of a module that is a rule's code, but the code a rule is defined with (the first
    argument of ``shard_rule`` or ``checkpoint_rule``)."""
    defining = {
        id(node.args[0])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("shard_rule", "checkpoint_rule")
        and node.args
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in RULES and id(node) not in defining
    ]


def test_no_module_of_the_package_tests_a_rules_code_string():
    named = {
        str(path.relative_to(PACKAGE)): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if (found := rule_codes_named(ast.parse(path.read_text())))
    }
    assert named == {}


def test_the_code_string_check_sees_a_code_used_outside_a_definition():
    tree = ast.parse('@shard_rule("NV101", "x", "warning", "none", "y")\ndef f(s): ...\nwanted = {"NV302"}\n')
    assert rule_codes_named(tree) == [(3, "NV302")]


NUMBERS = {"twenty": 20, "twenty-one": 21, "twenty-two": 22, "nineteen": 19}


def test_the_readme_counts_the_rules_the_catalogue_has():
    readme = (DOCS.parent / "README.md").read_text()
    said = [NUMBERS[word] for word in NUMBERS if f"doctor: {word} rules" in readme]
    assert said == [len(RULES)]
