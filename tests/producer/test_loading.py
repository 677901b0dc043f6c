"""3d: transformers + compressed-tensors load both layouts; the patched stack decompresses them identically."""

from __future__ import annotations

import pytest
import torch

import compressed_tensors_patch
from compressed_tensors_patch import toy_moe
from scalar_scales_testkit.producer import (
    REFUSES_0D_UNPATCHED,
    cosine,
    differing,
    load_and_run,
    load_reference,
    refuses_0d_unpatched,
)

SCHEMES = toy_moe.SCHEMES
MIN_COSINE = 0.95


@pytest.mark.parametrize("scheme", SCHEMES)
def test_patched_stack_decompresses_legacy_and_format2_bit_identically(artifact, prompt_ids, scheme):
    legacy, _ = load_and_run(artifact(scheme, patched=False), prompt_ids, patched=True)
    scalar, _ = load_and_run(artifact(scheme, patched=True), prompt_ids, patched=True)
    assert differing(legacy, scalar) == []


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("patched_artifact", [False, True], ids=["legacy", "format2"])
def test_patched_stack_logits_match_bf16(artifact, prompt_ids, bf16_logits, scheme, patched_artifact):
    _, logits = load_and_run(artifact(scheme, patched=patched_artifact), prompt_ids, patched=True)
    assert cosine(logits, bf16_logits) >= MIN_COSINE


@pytest.mark.skipif(refuses_0d_unpatched(), reason=REFUSES_0D_UNPATCHED)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_unpatched_stack_loads_format2_but_decompresses_differently(artifact, prompt_ids, bf16_logits, scheme):
    """What an unpatched stack does with format 2 (recorded in docs/compatibility.md).

    It loads and runs, with 0-D scales in memory; a 0-D float32 global scale
    leaves `scale / global_scale` in bf16 where (1,) promotes to float32, so
    decompressed weights differ from the legacy artifact's.
    """
    legacy, _ = load_and_run(artifact(scheme, patched=False), prompt_ids, patched=False)
    scalar, logits = load_and_run(artifact(scheme, patched=True), prompt_ids, patched=False)
    assert cosine(logits, bf16_logits) >= MIN_COSINE
    assert {tuple(t.shape) for n, t in scalar.items() if n.endswith("weight_global_scale")} == {()}
    assert [n for n in differing(legacy, scalar) if n.endswith(".weight")] != []


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("leave", ["revert", "block"])
def test_a_model_loaded_under_the_patch_decompresses_like_legacy_when_first_run_after_it(
    artifact, prompt_ids, scheme, leave
):
    """compressed-tensors decompresses on the first forward; the patch may be gone by then."""
    legacy, _ = load_and_run(artifact(scheme, patched=False), prompt_ids, patched=True)
    if leave == "block":
        with compressed_tensors_patch.applied():
            model = load_reference(artifact(scheme, patched=True))
    else:
        compressed_tensors_patch.apply()
        model = load_reference(artifact(scheme, patched=True))
        compressed_tensors_patch.revert()
    assert not compressed_tensors_patch.is_applied()
    with torch.no_grad():
        model(prompt_ids)
    assert differing(legacy, {name: p.detach() for name, p in model.named_parameters()}) == []
