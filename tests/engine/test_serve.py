"""vLLM's engine serves NVFP4 artifacts on the CPU through the plugin's emulation, legacy and format 2 alike."""

from __future__ import annotations

import re
import shutil

import pytest
from safetensors.torch import load_file, save_file

SERVED = ("NVFP4-legacy", "NVFP4-format2", "NVFP4-legacy-migrated", "NVFP4A16-legacy")
MIN_COSINE = 0.99
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
