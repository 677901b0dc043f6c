"""vLLM's engine serves NVFP4 artifacts on the CPU through the plugin's emulation, legacy and format 2 alike.

What it computes for each form is recorded for the compatibility matrix (family ``vllm-served``): its prompt
logits against the reference logits (scripts/reference_logits.py), judged in float32 (``computed`` says how), with
the bf16 distance (``logits_error``) beside it.
"""

from __future__ import annotations

import re
import shutil

import pytest
import torch
import vllm
from safetensors.torch import load_file, save_file

from scalar_scales_testkit.roundtrip import (
    FORMS,
    SAME_OUTPUT,
    SCHEMES,
    Artifact,
    Result,
    logged_error,
    logits_error,
    reference_logits,
)

PRODUCER = "0.19.0"
SERVED = tuple(f"{scheme}-{form}" for scheme in SCHEMES for form in FORMS)
"""Every form of both schemes, as the compatibility matrix shows them (the engine serves each once: ``serve``)."""
CONSUMER = f"vLLM {vllm.__version__} engine on the CPU, the plugin's NVFP4 emulation"
FIX = "scalar_scales plugin"
"""Without it, vLLM on the CPU has no NVFP4 kernel and refuses NVFP4 (the test below that switches it off)."""
MIN_COSINE = 0.99
FLOAT32_SAME = 1e-5
"""``logits_error`` of two float32 computations of the same product in another order (observed: 4.1e-07)."""
EMULATING = "scalar-scales: vLLM has no NVFP4 kernel on the CPU; emulating NVFP4"


@pytest.mark.parametrize("name", SERVED)
def test_the_engine_serves_the_artifact(serve, artifact, name):
    served = serve(artifact(name))
    assert served.returncode == 0, served.log[-3000:]
    assert [len(tokens) for tokens in served.tokens] == [16, 16]


@pytest.mark.parametrize("name", SERVED)
def test_the_emulation_says_so_in_one_warning_line(serve, artifact, name):
    assert serve(artifact(name)).log.count(EMULATING) == 1


@pytest.mark.parametrize("other", ["NVFP4-format2", "NVFP4-legacy-migrated"])
def test_greedy_tokens_are_identical_to_the_legacy_artifacts(serve, artifact, other):
    legacy, tokens = serve(artifact("NVFP4-legacy")).tokens, serve(artifact(other)).tokens
    assert legacy and tokens == legacy


def test_greedy_tokens_are_not_degenerate(serve, artifact):
    for tokens in serve(artifact("NVFP4-legacy")).tokens:
        assert len(set(tokens)) > 3, tokens


@pytest.mark.parametrize("name", SERVED)
def test_logits_agree_with_transformers_and_compressed_tensors(serve, artifact, reference, cosines, name):
    found = cosines(serve(artifact(name)), reference(name))
    assert found.min().item() >= MIN_COSINE, found


def test_a_wrong_input_global_scale_changes_the_output(serve, artifact, cosines, tmp_path):
    """The loaded input_global_scale is used: ×4 on every one of them moves the logits measurably."""
    corrupted = shutil.copytree(artifact("NVFP4-legacy"), tmp_path / "corrupted")
    for shard in corrupted.glob("*.safetensors"):
        tensors = load_file(shard)
        save_file(
            {n: t * 4 if n.endswith("input_global_scale") else t for n, t in tensors.items()},
            shard,
            metadata={"format": "pt"},
        )
    good, bad = serve(artifact("NVFP4-legacy")), serve(corrupted)
    assert bad.returncode == 0, bad.log[-3000:]
    found = cosines(good, bad)
    assert found.min().item() < 0.99, found


def test_switched_off_vllm_refuses_nvfp4_on_the_cpu(serve, artifact):
    served = serve(artifact("NVFP4-legacy"), SCALAR_SCALES_NVFP4_EMULATION="0")
    assert served.returncode != 0
    assert "Failed to find a kernel that can implement the NVFP4 linear layer" in served.log
    assert EMULATING not in served.log


def test_a_serve_that_fails_is_recorded_with_the_error_its_engine_raised(serve, artifact):
    """What a served row says where the engine fails: the last traceback's error line, from the serve's log."""
    served = serve(artifact("NVFP4-legacy"), SCALAR_SCALES_NVFP4_EMULATION="0")
    assert logged_error(served.log).startswith("ValueError: Failed to find a kernel that can implement the NVFP4")


def test_with_multiprocessing_the_plugin_emulates_in_the_worker_process(serve, artifact):
    served = serve(artifact("NVFP4-legacy"), dtype="float32", multiprocessing=True)
    assert served.returncode == 0, served.log[-3000:]
    (line,) = [line for line in served.log.splitlines() if EMULATING in line]
    worker = re.match(r"\((?:Worker|EngineCore)\S* pid=(\d+)\)", line)
    assert worker and int(worker[1]) != served.pid, line
    assert [len(tokens) for tokens in served.tokens] == [16, 16]


def test_the_compiled_engine_serves_with_the_emulation_too(serve, artifact, reference, cosines):
    """The emulated layers are custom ops, so vLLM's torch.compile treats each as one opaque call."""
    served = serve(artifact("NVFP4-legacy"), compiled=True)
    assert served.returncode == 0, served.log[-3000:]
    assert EMULATING in served.log
    assert cosines(served, reference("NVFP4-legacy")).min().item() >= MIN_COSINE


@pytest.fixture(scope="module")
def computed(serve, artifact):
    """``computed(name)``: what the engine computed for one artifact, measured against the reference and recorded
    once for the compatibility matrix. vLLM's rows start at position 1 (``cosines`` says why), so the reference's
    are taken without its last.

    The verdict is taken in float32, where two orders of the same arithmetic agree to float32's rounding: the
    scheme's legacy form served in float32 against the reference's float32 logits, and each form's bf16 logits
    identical to its legacy form's. In bf16 the engine and the reference each round in their own order, which
    parts them by more than one bf16 step (the bf16 error is recorded too, and the test below shows why)."""
    cache: dict[str, Result] = {}

    def float32_error(scheme: str) -> float:
        name = f"{scheme}-legacy"
        served = serve(artifact(name), dtype="float32", multiprocessing=True)  # the worker-process test's kind
        reference = reference_logits(Artifact(PRODUCER, scheme, "legacy", artifact(name)), float32=True)
        return logits_error(torch.tensor(served.centred_logprobs), reference[:, :-1])

    def get(name: str) -> Result:
        if name not in cache:
            scheme, form = name.split("-", 1)
            served_artifact = Artifact(PRODUCER, scheme, form, artifact(name))
            served = serve(served_artifact.path)
            result = Result(CONSUMER, FIX, served_artifact, loads=served.returncode == 0, scales_scope="served")
            if result.loads:
                bf16 = logits_error(torch.tensor(served.centred_logprobs), reference_logits(served_artifact)[:, :-1])
                as_legacy = served.centred_logprobs == serve(artifact(f"{scheme}-legacy")).centred_logprobs
                in_float32 = float32_error(scheme)
                result.details |= {
                    "logits_error": f"{bf16:.1e}",
                    "float32_error": f"{in_float32:.1e}",
                    "as_legacy": as_legacy,
                    "same_output": as_legacy and in_float32 < FLOAT32_SAME,
                }
            else:
                result.error = logged_error(served.log)
            result.record("vllm-served")
            cache[name] = result
        return cache[name]

    return get


@pytest.mark.parametrize("name", SERVED)
def test_every_form_is_served_and_computes_the_references_output(computed, name):
    result = computed(name)
    assert result.loads, result.error
    assert result.details["same_output"], result.details


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_form_of_a_scheme_computes_exactly_what_its_legacy_form_computes(computed, scheme):
    assert all(computed(f"{scheme}-{form}").details["as_legacy"] for form in FORMS)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_in_float32_the_engine_computes_the_references_output(computed, scheme):
    """Both sides fake-quantize W4A4 activations (compressed-tensors, and the emulation restating it): with the same
    weights in float32 they agree to float32's rounding, so what parts them in bf16 is bf16's."""
    assert float(computed(f"{scheme}-legacy").details["float32_error"]) < FLOAT32_SAME


def test_in_bfloat16_both_schemes_are_more_than_one_bf16_step_from_the_reference_w4a4_twice_as_far(computed):
    """bf16 rounding in another order moves an activation across an FP4 rounding boundary now and then, and W4A4
    then moves it by a whole FP4 step: observed 1.1e-01 for W4A4, 1.7e-02 for W4A16, both above one bf16 step."""
    w4a4, w4a16 = (float(computed(f"{scheme}-legacy").details["logits_error"]) for scheme in SCHEMES)
    assert w4a4 > 2 * w4a16 > 2 * SAME_OUTPUT
