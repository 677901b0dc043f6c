"""Consumer: a loader that copies each per-tensor scale into a 0-D slot with `copy_`, with and without to_scalar.

This is the shape vLLM issue 43297 failed on (and upstream PR 43362's own
demonstration): ``slot.copy_(loaded)`` with a 0-D ``slot`` raises for a (1,)
value. It needs only torch and safetensors, so it runs once, in the producer
environment. The weights such a loader computes with are the packed weights
and group scales as stored and the global scales in its slots; it has no
dequantization of its own, so compressed-tensors' dequantizes them with the
slots' values, for the comparison with the reference weights.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch

import vllm_patch
from scalar_scales_testkit.roundtrip import (
    Artifact,
    Result,
    error_line,
    global_scales_on_disk,
    recorded_loads,
    reference_weights,
    same_values,
    scales_digest,
    weights_compared,
)

CONSUMER = f"copy_ into 0-D slots (torch {torch.__version__})"
FIXES = {False: "none", True: "vllm_patch.to_scalar"}


@functools.cache
def reference(path: Path) -> dict[str, torch.Tensor]:
    """The artifact's reference weights, every NVFP4 weight, once for both loads of it."""
    return reference_weights(path, lambda _: True)


def load(artifact: Artifact, fixed: bool) -> Result:
    result = Result(CONSUMER, FIXES[fixed], artifact, loads=False)
    on_disk = global_scales_on_disk(artifact.path)
    slots = {name: torch.zeros((), dtype=torch.float32) for name in on_disk}
    try:
        for name, value in on_disk.items():
            slots[name].copy_(vllm_patch.to_scalar(value, name=name) if fixed else value)
    except Exception as error:
        result.error = error_line(error)
        return result
    result.loads = True
    result.scales_equal_disk = same_values(slots, on_disk)
    result.scales_digest = scales_digest(slots)
    computed = reference_weights(artifact.path, lambda _: True, global_scales=slots)
    result.details |= weights_compared(computed, reference(artifact.path))
    return result


@pytest.fixture(scope="module")
def loaded():
    """``loaded(artifact, fixed)``: each (artifact, fix) loaded and recorded once."""
    return recorded_loads(load, "copy_")


def test_every_form_loads_through_to_scalar(loaded, artifact):
    result = loaded(artifact, True)
    assert result.loads and result.scales_equal_disk, result.error


def test_without_to_scalar_exactly_the_1_shaped_forms_fail_with_the_reported_error(loaded, artifact):
    result = loaded(artifact, False)
    if artifact.form in ("legacy", "format2-to-legacy"):
        assert result.error == "RuntimeError: output with shape [] doesn't match the broadcast shape [1]"
    else:
        assert result.loads and result.scales_equal_disk, result.error


def test_through_to_scalar_every_form_computes_with_the_reference_weights(loaded, artifact):
    assert loaded(artifact, True).details["same_weights"]


def test_loaded_scale_values_are_identical_across_the_four_forms(loaded, family):
    assert len({loaded(artifact, True).scales_digest for artifact in family}) == 1
