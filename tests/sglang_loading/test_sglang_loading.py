"""SGLang 0.5.23 loading NVFP4 MLA checkpoints, legacy and format 2, without and with the plugin.

SGLang fuses each layer's MLA a-projections (``q_a_proj``,
``kv_a_proj_with_mqa``) into ``fused_qkv_a_proj_with_mqa`` on load, and its
NVFP4 kernel takes one global scale for the fused weight. What it does with
each shape is observed through its own ``get_model`` (model construction, the
model's ``load_weights``, post-processing) on the CPU, for DeepSeek-V3
(``deepseek_weight_loader``) and GLM-4-MoE-Lite (its own loader).
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from scalar_scales_testkit.roundtrip import artifacts_root
from scalar_scales_testkit.sglang_cpu import FUSED, MODELS, fused_scales_on_disk, with_kv_a_scale_doubled

LEGACY_FAILURE = (
    "AssertionError: param.shape=torch.Size([1]) param.dtype=torch.float32 "
    "loaded_weight.shape=torch.Size([2]) loaded_weight.dtype=torch.float32"
)
ZERO_D_CAT_FAILURE = "RuntimeError: zero-dimensional tensor (at position 0) cannot be concatenated"


@pytest.mark.parametrize("toy", MODELS)
@pytest.mark.parametrize("form", ["legacy", "format2-to-legacy"])
def test_sglang_refuses_a_legacy_checkpoint_whose_mla_a_projections_are_nvfp4(observed, toy, form):
    found = observed(toy, form)
    assert not found["loaded"] and found["error"] == LEGACY_FAILURE


@pytest.mark.parametrize("form", ["format2", "legacy-migrated"])
def test_sglang_loads_a_deepseek_checkpoint_of_0_d_global_scales(observed, form):
    assert observed("deepseek-v3", form)["loaded"]


@pytest.mark.parametrize("form", ["format2", "legacy-migrated"])
def test_sglang_refuses_a_glm_checkpoint_of_0_d_global_scales(observed, form):
    found = observed("glm4-moe-lite", form)
    assert not found["loaded"] and found["error"] == ZERO_D_CAT_FAILURE


@pytest.fixture(scope="module")
def kv_a_doubled(load, artifact, tmp_path_factory) -> tuple[dict[str, Any], float, float]:
    """SGLang's load, without the plugin, of the DeepSeek-V3 format 2 artifact with layer 0's kv_a_proj weight
    global scale doubled (its weights compared), and the two scales."""
    path = shutil.copytree(artifact("deepseek-v3", "format2"), tmp_path_factory.mktemp("kv-a") / "NVFP4-format2")
    q_a, kv_a = with_kv_a_scale_doubled(path)
    return load(path, weights=True), q_a, kv_a


def test_sglang_keeps_q_a_proj_s_global_scale_and_drops_kv_a_proj_s_without_a_word(kv_a_doubled):
    found, q_a, kv_a = kv_a_doubled
    assert found["loaded"] and found["fused"][FUSED.format(0, "weight_global_scale")] == [q_a]
    assert q_a != kv_a


def test_where_it_drops_kv_a_proj_s_global_scale_sglang_computes_kv_a_proj_with_the_wrong_weights(kv_a_doubled):
    """kv_a_proj is dequantized with q_a_proj's global scale, half its own: its weights twice the reference's."""
    found, _, _ = kv_a_doubled
    assert (found["weights"]["weights_error"], found["weights"]["same_weights"]) == ("1.0e+00", False)
    assert found["weights"]["worst_module"].endswith(".kv_a_proj_with_mqa")


@pytest.mark.parametrize("form", ["format2", "legacy-migrated"])
def test_sglang_computes_a_deepseek_checkpoint_of_0_d_global_scales_with_the_reference_weights(observed, form):
    assert observed("deepseek-v3", form)["weights"]["same_weights"]


@pytest.mark.parametrize("toy", MODELS)
@pytest.mark.parametrize("form", ["legacy", "format2", "legacy-migrated", "format2-to-legacy"])
def test_with_the_plugin_every_form_loads_with_the_scales_on_disk(observed, artifact, toy, form):
    found = observed(toy, form, plugins=True)
    path = artifact(toy, form)
    assert found["patched"] and found["loaded"]
    assert found["fused"] == fused_scales_on_disk(path, "q_a_proj") == fused_scales_on_disk(path, "kv_a_proj_with_mqa")


@pytest.mark.parametrize("toy", MODELS)
@pytest.mark.parametrize("form", ["legacy", "format2", "legacy-migrated", "format2-to-legacy"])
def test_with_the_plugin_every_form_computes_with_the_reference_weights(observed, toy, form):
    """Every NVFP4 module of the checkpoint (the linear layers, the fused ones split back into their parts, and the
    routed experts), as SGLang holds it after its post-load processing (its group scales read back through
    ``unswizzled``, which this shows right: a wrong inverse scrambles them)."""
    assert observed(toy, form, plugins=True)["weights"]["same_weights"]


@pytest.mark.parametrize(
    ("toy", "form"), [("deepseek-v3", "legacy"), ("deepseek-v3", "format2"), ("glm4-moe-lite", "format2")]
)
def test_with_the_plugin_differing_fused_global_scales_are_a_named_error(load, artifact, copied, toy, form):
    q_a, kv_a = with_kv_a_scale_doubled(path := copied(artifact(toy, form)))
    found = load(path, plugins=True)
    assert not found["loaded"]
    assert found["error"].startswith(
        "FusedScalesDifferError: model.layers.0.self_attn.fused_qkv_a_proj_with_mqa.weight_global_scale: SGLang fuses "
        "2 layers (model.layers.0.self_attn.q_a_proj.weight_global_scale and "
        "model.layers.0.self_attn.kv_a_proj_with_mqa.weight_global_scale) into one, which takes one per-tensor scale, "
        f"but theirs differ ({q_a!r}, {kv_a!r})"
    )


def test_the_plugin_is_found_through_sglang_s_entry_point_and_says_what_it_patched_in_one_line(
    loader_process, artifact
):
    """The plugin writes its line once per process, at its first load: a loader process of this test's own."""
    found = loader_process(plugins=True)(artifact("deepseek-v3", "format2"))
    lines = [line for line in found["log"].splitlines() if "scalar-scales:" in line]
    assert found["patched"] and len(lines) == 1
    assert lines[0].endswith(
        "scalar-scales: SGLang 0.5.23: patched load_weights_only (0-D global scales enter as (1,), the shape "
        "llm-compressor has always written, and the per-tensor scales of layers fused into one are compared by "
        "name); weight_loader (a fused layer's per-tensor scale takes its parts' equal "
        "values as one, and refuses differing ones)"
    )


def test_sglang_plugins_without_ours_switches_it_off(load, artifact):
    found = load(artifact("deepseek-v3", "legacy"), plugins=True, env={"SGLANG_PLUGINS": "another_plugin"})
    assert not found["patched"] and found["error"] == LEGACY_FAILURE


def test_the_fused_layer_computes_with_one_alpha_from_its_one_pair_of_global_scales(observed):
    """SGLang's NVFP4 linear keeps one weight and one input global scale for the fused weight, and its GEMM
    takes ``alpha = 1 / (input_global_scale * weight_global_scale)``: one value for both parts."""
    found = observed("deepseek-v3", "format2", plugins=True)
    weight, activation = (
        found["fused"][FUSED.format(0, scale)] for scale in ("weight_global_scale", "input_global_scale")
    )
    assert found["alpha"] == {FUSED.format(0, "alpha"): [pytest.approx(1 / (weight[0] * activation[0]), rel=1e-6)]}


@pytest.mark.parametrize("form", ["legacy-migrated", "format2"])
def test_sglang_cannot_split_an_nvfp4_kv_b_proj_whatever_the_shape_of_its_scales(load, form):
    """Why the SGLang artifacts keep ``kv_b_proj`` in bf16: the engine tests' DeepSeek-V3 toy, every linear layer
    NVFP4, fails after loading, where SGLang's MLA splits ``kv_b_proj.weight``."""
    found = load(artifacts_root() / "toys" / "deepseek-v3" / "ct-0.19.0" / f"NVFP4-{form}", plugins=True)
    assert (
        not found["loaded"]
        and found["error"] == "AttributeError: 'ColumnParallelLinear' object has no attribute 'weight'"
    )
