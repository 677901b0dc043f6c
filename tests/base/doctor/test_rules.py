"""The rule catalogue: each rule one object, its reference generated from it (docs/rules.md, ``scalar-scales
rule``), and no module but the one that defines a rule naming its code."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import scalar_scales
from scalar_scales.doctor import RULES, reference_document, rule_reference, selected_codes
from scalar_scales.nvfp4 import COMPRESSED_TENSORS_LAYOUT, MODELOPT_LAYOUT
from scalar_scales_testkit.broken import CORPUS, MODELOPT_CORPUS, clean_checkpoint, to_modelopt
from scalar_scales_testkit.cli import run_cli, run_cli_in_process

DOCS = Path(__file__).parents[3] / "docs"
PACKAGE = Path(scalar_scales.__file__).parent


def test_docs_rules_md_is_what_the_catalogue_generates():
    assert (DOCS / "rules.md").read_text() == reference_document(), (
        "docs/rules.md is stale: regenerate it with `python scripts/rule_docs.py`"
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


@pytest.mark.parametrize(("code", "alongside"), [("NV102", "NV101"), ("NV609", "NV401")])
def test_a_reference_example_names_the_rules_its_break_brings_alongside(code, alongside):
    """The reference's introduction says no other rule finds anything in an example but those it names, and the
    broken corpus holds these examples to finding both rules."""
    assert f"({alongside} found alongside)." in rule_reference(RULES[code])


def test_rule_as_json_is_one_object_of_the_rule_s_data():
    result = run_cli_in_process("rule", "NV101", "--output-format", "json")
    data = json.loads(result.stdout)
    rule = RULES["NV101"]
    assert (result.returncode, data["code"], data["name"], data["severity"]) == (0, "NV101", rule.name, "warning")
    assert (data["explanation"], data["fix"], data["fixable"], data["effect"]) == (
        rule.explanation,
        "scalar-scales migrate",
        True,
        rule.effect,
    )


def test_a_rule_whose_fix_is_said_in_words_is_not_marked_fixable():
    data = json.loads(run_cli_in_process("rule", "NV607", "--output-format", "json").stdout)
    assert (data["fix"], data["fixable"]) == (RULES["NV607"].fix, False)
    assert isinstance(data["fix"], str)


def test_the_json_keys_are_those_docs_check_md_lists():
    data = json.loads(run_cli_in_process("rule", "NV301", "--output-format", "json").stdout)
    docs = (DOCS / "check.md").read_text()
    listed = docs.split("an object for one rule (its", 1)[1].split(")", 1)[0]
    assert set(data) == set(re.findall(r"`(\w+)`", listed))


def test_rule_all_as_json_is_a_list_of_every_rule_in_code_order():
    data = json.loads(run_cli_in_process("rule", "--all", "--output-format", "json").stdout)
    assert [rule["code"] for rule in data] == list(RULES)


def test_rule_of_several_codes_as_json_is_a_list():
    data = json.loads(run_cli_in_process("rule", "NV301", "NV101", "--output-format", "json").stdout)
    assert [rule["code"] for rule in data] == ["NV301", "NV101"]


def test_a_rules_reference_is_whole_where_python_strips_docstrings():
    """``python -OO`` (PYTHONOPTIMIZE=2) strips every docstring: a rule's text is data, so ``rule`` prints it all."""
    result = run_cli("rule", "NV301", env={"PYTHONOPTIMIZE": "2", "PYTHONDONTWRITEBYTECODE": "1"})
    assert result.returncode == 0 and result.stdout.startswith(rule_reference(RULES["NV301"]))
    assert RULES["NV301"].explanation.splitlines()[0] in result.stdout


def test_nv302_explains_the_bound_its_function_applies_to_an_input_scale():
    """ModelOpt's input_scale is the other convention above 65504 / 2688, not above 1: an input_scale of 20 (amax
    53,760) is a float16 activation's, and the rule lets it pass; its explanation must say the bound it applies."""
    for layout in (COMPRESSED_TENSORS_LAYOUT, MODELOPT_LAYOUT):
        bound = layout.other_convention_bound(layout.input_global)
        assert f"≈ {bound:.3g}" in RULES["NV302"].explanation


def nv607_codes(checkpoint: Path) -> set[str]:
    return {
        finding["code"] for finding in json.loads(run_cli_in_process("check", checkpoint, "--json").stdout)["findings"]
    }


def test_nv607_s_line_of_the_text_report_says_its_fix(tmp_path):
    checkpoint = clean_checkpoint(tmp_path / "ckpt")
    CORPUS["quantization-undeclared"].make(checkpoint, COMPRESSED_TENSORS_LAYOUT)
    lines = run_cli_in_process("check", checkpoint).stdout.splitlines()
    (line,) = (line for line in lines if line.startswith("NV607 "))
    assert line.endswith(f"; fix: {RULES['NV607'].fix}")


def test_putting_back_config_json_s_quantization_config_clears_nv607(tmp_path):
    checkpoint = clean_checkpoint(tmp_path / "ckpt")
    declared = json.loads((checkpoint / "config.json").read_text())["quantization_config"]
    CORPUS["quantization-undeclared"].make(checkpoint, COMPRESSED_TENSORS_LAYOUT)
    assert "NV607" in nv607_codes(checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "quantization_config": declared}))
    assert nv607_codes(checkpoint) == set()


def test_putting_back_modelopt_s_hf_quant_config_json_clears_nv607(tmp_path):
    checkpoint = clean_checkpoint(tmp_path / "ckpt")
    to_modelopt(checkpoint)
    declared = (checkpoint / "hf_quant_config.json").read_bytes()
    MODELOPT_CORPUS["quantization-undeclared"].make(checkpoint, MODELOPT_LAYOUT)
    assert "NV607" in nv607_codes(checkpoint)
    (checkpoint / "hf_quant_config.json").write_bytes(declared)
    assert nv607_codes(checkpoint) == set()


def test_hf_quant_config_json_under_a_config_json_declaring_another_quantization_leaves_nv607(tmp_path):
    checkpoint = clean_checkpoint(tmp_path / "ckpt")
    to_modelopt(checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    other = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    (checkpoint / "config.json").write_text(json.dumps({**config, "quantization_config": other}))
    assert "NV607" in nv607_codes(checkpoint)


def test_selected_codes_takes_a_generator_as_it_takes_a_list():
    """An iterable is read once: a generator read twice selected no rule, and every rule was off."""
    scale_values = {code for code in RULES if code.startswith("NV3")}
    assert selected_codes(code for code in ["NV3"]) == selected_codes(["NV3"]) == scale_values != set()


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


def test_the_readme_counts_the_rules_the_catalogue_has():
    """scripts/rule_docs.py writes the count; a rule added without running it fails here."""
    readme = (DOCS.parent / "README.md").read_text()
    assert re.findall(r"doctor: (\d+) rules", readme) == [str(len(RULES))], (
        "README.md's count of rules is stale: regenerate it with `python scripts/rule_docs.py`"
    )
