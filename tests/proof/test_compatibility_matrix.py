"""scripts/compatibility_matrix.py's transformers rows: the decision guide says what each stack computed against the
reference logits, by how much it missed them, or the error it failed with (the full run's results feed it; these
rows are made here as the round-trip tests record them)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "compatibility_matrix.py"
KIT = "transformers 5.17.0 + compressed-tensors 0.20.1"
PLAIN = "transformers 5.25.0 from_pretrained + compressed-tensors 0.20.1"


@pytest.fixture(scope="module")
def matrix() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compatibility_matrix", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(family: str, consumer: str, form: str, scheme: str = "NVFP4", **details: Any) -> dict[str, Any]:
    error = details.pop("error", None)
    return {
        "family": family,
        "consumer": consumer,
        "fix": "none",
        "artifact": {"producer": "0.20.1", "scheme": scheme, "form": form},
        "loads": error is None,
        "error": error,
        "details": details,
    }


def guide_row(matrix: ModuleType, rows: list[dict[str, Any]]) -> str:
    (line,) = matrix.decision_guide(rows)[3:-1]
    return line


def test_a_shape_whose_every_artifact_gives_the_reference_output_says_so(matrix):
    rows = [row("transformers", KIT, form, same_output=True, logits_error="0.0e+00") for form in matrix.FORMS]
    cell = "✅ same output as the reference"
    assert (
        guide_row(matrix, rows)
        == f"| {KIT}, through llm-compressor's `load_quantizable_moe` (the test kit's path) | none | {cell} | {cell} |"
    )


def test_a_wrong_output_says_its_worst_distance_from_the_reference_and_from_the_reference_weights(matrix):
    wrong = {"same_output": False, "max_relative_difference": "7.8e-03"}
    rows = [
        row("transformers", KIT, "legacy", same_output=True, logits_error="0.0e+00"),
        row("transformers", KIT, "format2-to-legacy", same_output=True, logits_error="0.0e+00"),
        row("transformers", KIT, "format2", logits_error="1.5e-01", **wrong),
        row("transformers", KIT, "legacy-migrated", scheme="NVFP4A16", logits_error="8.4e-03", **wrong),
    ]
    assert guide_row(matrix, rows).endswith(
        "| ❌ loads, wrong output: logits up to 1.5e-01 from the reference, weights up to 7.8e-03 from the "
        "reference's (legacy's) |"
    )


def test_plain_from_pretrained_says_how_far_its_experts_are_from_the_unquantized_weights(matrix):
    measured = {"same_output": False, "logits_error": "1.5e+00", "experts_error": "3.0e+04"}
    rows = [row("transformers-from-pretrained", PLAIN, form, **measured) for form in matrix.FORMS]
    cell = (
        "❌ loads, wrong output: logits up to 1.5e+00 from the reference, experts' weights up to 3.0e+04 from the "
        "unquantized"
    )
    assert guide_row(matrix, rows) == f"| {PLAIN} | none | {cell} | {cell} |"


def test_a_shape_that_fails_shows_the_error_as_code_even_where_it_quotes_with_backticks(matrix):
    error = "RuntimeError: You set `ignore_mismatched_sizes` to `False`, thus raising an error."
    measured = {"same_output": False, "logits_error": "1.5e+00", "experts_error": "3.0e+04"}
    rows = [
        row(
            "transformers-from-pretrained",
            PLAIN,
            form,
            **({"error": error} if form in ("format2", "legacy-migrated") else measured),
        )
        for form in matrix.FORMS
    ]
    assert guide_row(matrix, rows).endswith(f"| ❌ `` {error} `` |")


def test_plain_from_pretrained_is_in_the_guide_and_in_the_packages_observations(matrix):
    """What check and migrate say a checkpoint's shape does to each consumer covers what a user runs: a release
    whose plain from_pretrained refuses one shape is named where it is that shape."""
    measured = {"same_output": False, "logits_error": "1.5e+00", "experts_error": "3.0e+04"}
    rows = [row("transformers-from-pretrained", PLAIN, form, **measured) for form in matrix.FORMS]
    assert guide_row(matrix, rows).startswith(f"| {PLAIN} |")
    assert PLAIN in matrix.observed_module(rows)


VLLM = "vLLM 0.32.0 RoutedExperts"


def test_a_consumer_that_only_loads_says_it_computes_with_the_reference_weights(matrix):
    rows = [row("vllm", VLLM, form, weights_error="1.0e-07", same_weights=True) for form in matrix.FORMS]
    cell = "✅ same weights as the reference"
    assert guide_row(matrix, rows) == f"| {VLLM} | none | {cell} | {cell} |"
    assert matrix.consumer_cell(rows[0]) == cell


def test_a_consumer_that_only_loads_wrong_weights_says_its_worst_max_relative_error(matrix):
    rows = [
        row("vllm", VLLM, "legacy", weights_error="1.0e-07", same_weights=True),
        row("vllm", VLLM, "format2-to-legacy", weights_error="2.5e-01", same_weights=False),
        row("vllm", VLLM, "format2", weights_error="1.0e-07", same_weights=True),
        row("vllm", VLLM, "legacy-migrated", weights_error="1.0e-07", same_weights=True),
    ]
    assert guide_row(matrix, rows).endswith(
        "| ❌ loads, wrong weights (max relative error 2.5e-01) | ✅ same weights as the reference |"
    )
    assert matrix.consumer_cell(rows[1]) == "❌ loads, wrong weights (max relative error 2.5e-01)"
    assert "loads, wrong weights" in matrix.observed_module(rows)


def kit_constant(name: str) -> float:
    """A numeric constant of the test kit's roundtrip.py, read without importing it (it imports torch, which the
    base suite does not)."""
    tree = ast.parse((SCRIPT.parents[1] / "testkit" / "scalar_scales_testkit" / "roundtrip.py").read_text())
    (value,) = (
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [name]
    )
    return float(eval(compile(ast.Expression(value), name, "eval"), {}))


def test_the_legend_says_these_consumers_outputs_are_not_computed_and_gives_the_test_kits_bar(matrix, tmp_path):
    rows = [
        row("vllm", VLLM, form, scheme, weights_error="1.0e-07", same_weights=True)
        | {"scales_digest": scheme, "scales_scope": "expert global scales", "scales_equal_disk": True, "versions": {}}
        for scheme in matrix.SCHEMES
        for form in matrix.FORMS
    ]
    legend = " ".join(matrix.render(rows, "a toy", "2026-12-06", tmp_path).split())
    assert "their outputs are not computed on the CPU" in legend
    assert f"float32 rounding ({matrix.SAME_WEIGHTS} of each weight's largest value)" in legend
    base, exponent = matrix.SAME_WEIGHTS.split("^")
    assert float(base) ** int(exponent) == kit_constant("SAME_WEIGHTS")


def test_an_sglang_form_that_loads_says_whether_it_computes_with_the_reference_weights(matrix):
    sglang = "SGLang 0.5.23 DeepseekV3ForCausalLM"
    loads = row("sglang", sglang, "format2", weights_error="9.7e-08", same_weights=True)
    wrong = row("sglang", sglang, "legacy-migrated", weights_error="1.0e+00", same_weights=False)
    fails = row("sglang", sglang, "legacy", error="AssertionError: param.shape=torch.Size([1])")
    assert matrix.load_cell(loads) == "✅ same weights as the reference"
    assert matrix.load_cell(wrong) == "❌ loads, wrong weights (max relative error 1.0e+00)"
    assert matrix.load_cell(fails) == "❌ fails: `AssertionError: param.shape=torch.Size([1])`"


def test_sglangs_table_says_its_outputs_are_not_computed_and_what_its_weights_are_compared_with(matrix):
    rows = [
        row("sglang", "SGLang 0.5.23 DeepseekV3ForCausalLM", form, weights_error="9.7e-08", same_weights=True)
        for form in matrix.FORMS
    ]
    legend = " ".join(" ".join(matrix.sglang_section(rows)).split())
    assert "Loading runs no kernel, so the outputs are not computed" in legend
    assert "dequantized by SGLang's own `dequantize_nvfp4`, against the reference weights" in legend
