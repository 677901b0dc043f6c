"""Consumer: transformers + compressed-tensors, unpatched and patched, reloading through the test kit's path,
llm-compressor's load_quantizable_moe() (plain from_pretrained: test_transformers_from_pretrained.py).

Runs in every producer environment (compressed-tensors 0.19.0, 0.20.0 and 0.20.1)
on the artifacts of all. Decompressed weights are read after the first
forward pass, which is when compressed-tensors decompresses.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

pytest.importorskip("llmcompressor", reason="the transformers consumer runs in the producer environments")

import compressed_tensors
import torch
import transformers

from scalar_scales_testkit.producer import (
    cosine,
    differing,
    load_and_run,
    max_relative_difference,
)
from scalar_scales_testkit.roundtrip import (
    MIN_COSINE,
    SAME_OUTPUT,
    Artifact,
    Result,
    error_line,
    global_scales_on_disk,
    logits_error,
    reference_logits,
    same_values,
    scales_digest,
)

CONSUMER = f"transformers {transformers.__version__} + compressed-tensors {compressed_tensors.__version__}"
from scalar_scales.nvfp4 import is_global_scale  # noqa: E402

FIXES = {False: "none", True: "compressed_tensors_patch"}
MAX_UNPATCHED_RELATIVE_DIFFERENCE = 2**-7
"""Rounding ``scale / global_scale`` to bf16 before the product, instead of after it, moves a weight by at most
one bf16 step, which is at most 2^-7 of its value."""
MIN_UNPATCHED_COSINE_VS_LEGACY = 0.98


@dataclass
class Loaded:
    result: Result
    weights: dict[str, torch.Tensor]
    logits: torch.Tensor | None


def quantized_weights(params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The decompressed weight of every module that has a weight global scale."""
    modules = [n.removesuffix("weight_global_scale") for n in params if n.endswith("weight_global_scale")]
    return {f"{module}weight": params[f"{module}weight"] for module in modules}


def load(artifact: Artifact, patched: bool, prompt_ids: torch.Tensor) -> Loaded:
    result = Result(CONSUMER, FIXES[patched], artifact, loads=False)
    try:
        params, logits = load_and_run(artifact.path, prompt_ids, patched=patched)
    except Exception as error:
        result.error = error_line(error)
        return Loaded(result, {}, None)
    scales = {n: p for n, p in params.items() if is_global_scale(n)}
    result.loads = True
    result.scales_equal_disk = same_values(scales, global_scales_on_disk(artifact.path))
    result.scales_digest = scales_digest(scales)
    result.details["memory_shape"] = " ".join(sorted({str(tuple(t.shape)) for t in scales.values()}))
    error = logits_error(logits, reference_logits(artifact))
    result.details |= {"logits_error": f"{error:.1e}", "same_output": error <= SAME_OUTPUT}
    return Loaded(result, quantized_weights(params), logits)


def compare_with_legacy(entry: Loaded, legacy: Loaded | None) -> str:
    if legacy is None:
        return "reference"
    if not legacy.result.loads:
        return "legacy did not load"
    changed = differing(legacy.weights, entry.weights)
    return "identical" if not changed else f"{len(changed)} of {len(entry.weights)} differ"


@pytest.fixture(scope="session")
def loaded(prompt_ids, bf16_logits):
    """``loaded(artifact, patched)``: each (artifact, stack) loaded, compared and recorded once."""
    cache: dict[tuple[str, bool], Loaded] = {}

    def get(artifact: Artifact, patched: bool) -> Loaded:
        key = (artifact.id, patched)
        if key in cache:
            return cache[key]
        entry = cache[key] = load(artifact, patched, prompt_ids)
        if entry.result.loads:
            legacy = None if artifact.form == "legacy" else get(artifact.in_form("legacy"), patched)
            verdict = entry.result.details["weights_vs_legacy"] = compare_with_legacy(entry, legacy)
            if legacy is not None and verdict.endswith(" differ"):
                entry.result.details["max_relative_difference"] = (
                    f"{max_relative_difference(legacy.weights, entry.weights):.1e}"
                )
                entry.result.details["logits_cosine_vs_legacy"] = f"{cosine(entry.logits, legacy.logits):.4f}"
            entry.result.details["cosine_ok"] = cosine(entry.logits, bf16_logits) >= MIN_COSINE
        entry.result.record("transformers")
        return entry

    return get


@pytest.mark.parametrize("patched", [True, False], ids=["patched", "unpatched"])
def test_every_form_loads(loaded, artifact, patched):
    """Both stacks load all four forms (what the unpatched one makes of 0-D scales is the next tests' subject)."""
    result = loaded(artifact, patched).result
    assert result.loads, result.error


@pytest.mark.parametrize("patched", [True, False], ids=["patched", "unpatched"])
def test_loaded_global_scales_equal_the_values_on_disk(loaded, artifact, patched):
    assert loaded(artifact, patched).result.scales_equal_disk


def test_patched_stack_decompresses_every_form_bit_identically_to_legacy(loaded, artifact):
    assert loaded(artifact, True).result.details["weights_vs_legacy"] in ("reference", "identical")


def test_patched_stack_logits_match_bf16(loaded, artifact):
    assert loaded(artifact, True).result.details["cosine_ok"]


def test_patched_stack_computes_the_reference_output(loaded, artifact):
    assert loaded(artifact, True).result.details["same_output"]


def test_unpatched_stack_computes_the_reference_output_from_1_shaped_scales_only(loaded, artifact):
    """The bf16 rounding of the 0-D forms' group scales (next tests) reaches the logits beyond one bf16 step."""
    on_disk_0d = artifact.form in ("format2", "legacy-migrated")
    assert loaded(artifact, False).result.details["same_output"] != on_disk_0d


def test_patched_stack_keeps_global_scales_1_shaped_in_memory(loaded, artifact):
    assert loaded(artifact, True).result.details["memory_shape"] == "(1,)"


@pytest.mark.parametrize("patched", [True, False], ids=["patched", "unpatched"])
def test_loaded_scale_values_are_identical_across_the_four_forms(loaded, family, patched):
    assert len({loaded(artifact, patched).result.scales_digest for artifact in family}) == 1


def test_unpatched_stack_decompresses_0d_artifacts_differently_from_legacy(loaded, artifact):
    """Upstream behaviour, shown rather than assumed: with a 0-D float32 global scale, `scale / global_scale`
    stays bf16 where (1,) promotes to float32, so 0-D forms decompress to different weights."""
    on_disk_0d = artifact.form in ("format2", "legacy-migrated")
    verdict = loaded(artifact, False).result.details["weights_vs_legacy"]
    assert (verdict not in ("reference", "identical")) == on_disk_0d


def test_the_unpatched_difference_is_quantified_and_small(loaded, artifact):
    """How far 0-D forms decompress from legacy in an unpatched stack: bf16 rounding of the group scales."""
    details = loaded(artifact, False).result.details
    if artifact.form not in ("format2", "legacy-migrated"):
        assert "max_relative_difference" not in details
        return
    assert 0 < float(details["max_relative_difference"]) <= MAX_UNPATCHED_RELATIVE_DIFFERENCE
    assert float(details["logits_cosine_vs_legacy"]) >= MIN_UNPATCHED_COSINE_VS_LEGACY
