"""`scalar-scales check` says which engines were observed not to load a checkpoint like the one checked: its shape of
global scale, its model class and the modules those belong to (``scalar_scales.consumers``, generated from the round
trip); a checkpoint an engine does not load is never a clean bill without saying so."""

from __future__ import annotations

import json

import pytest

from scalar_scales.consumers import NO_FIX, OBSERVED, Observation
from scalar_scales.doctor.examples import Example, Unquantize
from scalar_scales.files import Layout
from scalar_scales.nvfp4 import COMPRESSED_TENSORS_LAYOUT
from scalar_scales.sources import read_headers
from scalar_scales_testkit.broken import make_example, mla_checkpoint, to_modelopt
from scalar_scales_testkit.cli import run_cli_in_process
from scalar_scales_testkit.refusals import not_loaded_lines, observed_not_to_load

GLM = "Glm4MoeLiteForCausalLM"
DEEPSEEK = "DeepseekV3ForCausalLM"


def sglang(architecture: str, fix: str = NO_FIX) -> Observation:
    (found,) = (o for o in OBSERVED if o.family == "sglang" and o.architecture == architecture and o.fix == fix)
    return found


def not_loaded_line(observation: Observation, layout: Layout) -> str:
    """How the report says that ``observation``'s consumer fails on ``layout``'s scales: its error, and the fixes of
    the same consumer observed to load them."""
    fixes = [
        o.fix for o in OBSERVED if o.consumer == observation.consumer and o.fix != NO_FIX and o.outcome(layout).loads
    ]
    fixed = f"; it loads with {' or '.join(fixes)}" if fixes else ""
    return f"Not loaded by {observation.consumer}: {observation.outcome(layout).note}{fixed}"


def sglang_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("Not loaded by SGLang")]


def test_the_observations_hold_sglangs_refusal_of_0_d_scales_in_glms_fused_mla():
    assert not sglang(GLM).scalar.loads and sglang(GLM, "sglang_patch plugin").scalar.loads


def test_a_format_2_glm_checkpoint_names_sglang_which_does_not_load_it(tmp_path):
    result = run_cli_in_process("check", mla_checkpoint(tmp_path / "glm", GLM))
    lines = result.stdout.splitlines()
    assert result.returncode == 0
    assert sglang_lines(result.stdout) == [not_loaded_line(sglang(GLM), "scalar")]
    assert lines[-1].endswith(f"{sglang(GLM).consumer}.")


def test_quiet_still_names_the_engine_that_does_not_load_it(tmp_path):
    """An engine's refusal is what --quiet keeps with the findings: it is never a clean bill without saying so."""
    result = run_cli_in_process("check", "-q", checkpoint := mla_checkpoint(tmp_path / "glm", GLM))
    assert not_loaded_line(sglang(GLM), "scalar") in result.stdout.splitlines()
    assert result.stdout.splitlines() == not_loaded_lines(checkpoint)


def test_a_format_2_deepseek_checkpoint_which_sglang_loads_is_not_said_to_be_refused_by_sglang(tmp_path):
    """A clean bill as far as SGLang goes: the other engines' refusals of its 0-D scales (transformers'
    from_pretrained) are what the report says of any format-2 checkpoint."""
    assert sglang(DEEPSEEK).scalar.loads
    result = run_cli_in_process("check", checkpoint := mla_checkpoint(tmp_path / "deepseek", DEEPSEEK))
    assert result.returncode == 0 and sglang_lines(result.stdout) == []
    summary = result.stdout.splitlines()[-1]
    assert summary.startswith("All checks passed") and summary.endswith(observed_not_to_load(checkpoint) or ".")
    assert "SGLang" not in summary


def test_a_legacy_deepseek_checkpoint_names_sglangs_refusal_of_its_1_scales(tmp_path):
    result = run_cli_in_process("check", mla_checkpoint(tmp_path / "deepseek", DEEPSEEK, to="legacy"))
    assert sglang_lines(result.stdout) == [not_loaded_line(sglang(DEEPSEEK), "legacy")]


def test_a_checkpoint_whose_mla_a_projections_are_not_quantized_is_not_judged_by_sglangs_fusion(tmp_path):
    """The format-2 GLM checkpoint SGLang refuses, its a-projections stored as BF16 and ignored by its config, as
    a quantizer that skips them writes it: SGLang has no global scales of theirs to concatenate."""
    checkpoint = mla_checkpoint(tmp_path / "glm", GLM)
    a_projections = sorted(
        {name.rpartition(".")[0] for name in read_tensor_names(checkpoint) if "_a_proj" in name}, reverse=True
    )
    for module in a_projections:
        make_example(Example("a-projection-bf16", "", (Unquantize((module,)),)), checkpoint, COMPRESSED_TENSORS_LAYOUT)
    config = json.loads((checkpoint / "config.json").read_text())
    config["quantization_config"]["ignore"] += [r"re:.*\.q_a_proj$", r"re:.*\.kv_a_proj_with_mqa$"]
    (checkpoint / "config.json").write_text(json.dumps(config))
    assert len(a_projections) >= 2 and not any("_a_proj" in n and "scale" in n for n in read_tensor_names(checkpoint))
    result = run_cli_in_process("check", checkpoint)
    assert result.returncode == 0 and sglang_lines(result.stdout) == []
    assert result.stdout.splitlines()[-1].startswith("All checks passed")


def read_tensor_names(checkpoint) -> list[str]:
    return [name for header in read_headers(checkpoint) for name in header.names]


def test_a_modelopt_checkpoint_is_not_judged_by_what_was_observed_of_compressed_tensors(tmp_path):
    """Synthetic: the MLA toys' modules in ModelOpt's names, which no exporter run here writes (the round trip
    exports the toy Qwen3-MoE and a dense Llama)."""
    to_modelopt(checkpoint := mla_checkpoint(tmp_path / "glm", GLM))
    result = run_cli_in_process("check", checkpoint)
    assert "ModelOpt" in result.stdout and "Not loaded by" not in result.stdout


@pytest.mark.parametrize("architectures", ["Glm4MoeLiteForCausalLM", [1, None, {"a": GLM}], {"x": 1}, None])
def test_an_architectures_entry_that_is_not_a_list_of_names_names_no_model_class(tmp_path, architectures):
    checkpoint = mla_checkpoint(tmp_path / "glm", GLM)
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "architectures": architectures}))
    result = run_cli_in_process("check", checkpoint)
    assert result.returncode == 0 and sglang_lines(result.stdout) == []


def test_strict_fails_a_checkpoint_an_engine_does_not_load(tmp_path):
    assert run_cli_in_process("check", "--strict", mla_checkpoint(tmp_path / "glm", GLM)).returncode == 1


def test_json_names_the_engine_its_error_and_the_fix_that_loads_it(tmp_path):
    document = json.loads(run_cli_in_process("check", "--json", mla_checkpoint(tmp_path / "glm", GLM)).stdout)
    named = {"consumer": sglang(GLM).consumer, "error": sglang(GLM).scalar.note, "loaded_by": ["sglang_patch plugin"]}
    assert named in document["not_loaded_by"]


FROM_PRETRAINED = [o for o in OBSERVED if o.family == "transformers-from-pretrained" and o.fix == NO_FIX]
"""Plain ``AutoModelForCausalLM.from_pretrained`` as released, each transformers and compressed-tensors observed."""


@pytest.mark.parametrize("layout", ["legacy", "scalar"])
def test_each_plain_from_pretrained_observed_to_fail_on_the_checkpoints_shape_is_named_with_its_error(
    checkpoint, layout
):
    """transformers' from_pretrained loads every model class alike: of a toy checkpoint, the report names each
    release observed to fail on its shape of scale, with the error and the fixes that load
    it, and no release observed to load it."""
    assert FROM_PRETRAINED
    if layout == "scalar":
        assert run_cli_in_process("migrate", checkpoint).returncode == 0
    result = run_cli_in_process("check", checkpoint)
    lines = result.stdout.splitlines()
    for observation in FROM_PRETRAINED:
        said = [line for line in lines if line.startswith(f"Not loaded by {observation.consumer}:")]
        assert said == ([] if observation.outcome(layout).loads else [not_loaded_line(observation, layout)])
    refusing = [o.consumer for o in FROM_PRETRAINED if not o.outcome(layout).loads]
    assert all(consumer in lines[-1] for consumer in refusing)
    assert result.returncode == 0
    if layout == "scalar":  # no finding: --strict fails it for the refusals alone
        assert run_cli_in_process("check", "--strict", checkpoint).returncode == int(bool(refusing))


def test_a_loader_that_copies_into_0_d_slots_is_left_to_nv101(checkpoint):
    result = run_cli_in_process("check", checkpoint)
    assert "NV101" in result.stdout and "Not loaded by" not in result.stdout


def released(family: str) -> list[Observation]:
    return [o for o in OBSERVED if o.family == family and o.fix == NO_FIX]


def test_nv101s_message_says_what_vllm_transformers_and_a_copy_loader_were_seen_to_do_with_1_scales(checkpoint):
    message = json.loads(run_cli_in_process("check", "--json", checkpoint).stdout)["findings"][0]["message"]
    versions = [o.consumer.split()[1].removesuffix(".0") for o in released("vllm")]
    assert f"vLLM {', '.join(versions[:-1])} and {versions[-1]} load it (observed), and so does transformers" in message
    assert all(o.legacy.loads for o in released("vllm") + released("transformers"))
    (copy_loader,) = released("copy_")
    assert not copy_loader.legacy.loads
    assert copy_loader.legacy.note.removeprefix("RuntimeError: ") in message


def test_nv103s_message_says_vllm_loads_0_d_scales(checkpoint):
    """And names no other engine: whether each loads it is the report's "Not loaded by" lines' to say."""
    run_cli_in_process("migrate", checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    del config["quantization_config"]["format_version"]
    (checkpoint / "config.json").write_text(json.dumps(config))
    (finding,) = json.loads(run_cli_in_process("check", "--json", checkpoint).stdout)["findings"]
    assert finding["code"] == "NV103" and finding["message"].endswith("writes checkpoints so; vLLM loads it")
    assert all(o.scalar.loads for o in released("vllm"))
