"""Every SGLang 0.5.23 loader that fuses the MLA a-projections, loaded through ``get_model`` without a fix and
with the plugin: each form's outcome is the one docs/sglang.md's table says, and with the plugin every form
loads the checkpoint's scale or is refused naming both of the checkpoint's tensors.

The checkpoints are ``scalar_scales_testkit.sglang_loaders``': each loader's model at the toys' MLA sizes, its
a-projections as llm-compressor quantized the DeepSeek-V3 toy's. The loads of one fix share a loader process.
"""

from __future__ import annotations

import pytest

from scalar_scales_testkit.sglang_loaders import (
    FORMS,
    LOADERS,
    documented,
    expected_with_a_fix,
    marked,
    outcome,
)

FIXES = {"none": False, "plugin": True}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("fix", FIXES)
@pytest.mark.parametrize("name", LOADERS)
def test_each_fusing_loader_does_with_each_form_what_the_docs_say(loader_observed, name, fix, form):
    found, scales = loader_observed(name, form, FIXES[fix])
    assert marked(outcome(found, scales)) == documented(name, fix)[form], found["error"]


@pytest.mark.parametrize("fix", ["plugin", "upstream patch"])
@pytest.mark.parametrize("name", LOADERS)
def test_with_a_fix_the_docs_say_every_form_loads_the_checkpoint_s_scale_or_is_refused_by_name(name, fix):
    """The plugin's rows are loaded above; the upstream patch's by test_sglang_upstream_patch.py."""
    assert documented(name, fix) == {form: expected_with_a_fix(form) for form in FORMS}


@pytest.mark.parametrize(
    ("name", "fused"),
    [
        ("kimi-k3", "model.layers.0.self_attn.fused_qkv_a_proj_with_mqa"),
        ("deepseek-v3-nextn", "model.layers.2.self_attn.fused_qkv_a_proj_with_mqa"),
        ("kimi-k25-eagle3", "layers.0.self_attn.fused_qkv_a_proj_with_mqa"),
    ],
)
def test_with_the_plugin_differing_scales_are_refused_naming_the_checkpoint_s_tensors(loader_observed, name, fused):
    """Kimi-K3 copies slices itself, and a draft's loader renames the checkpoint's layers (DeepSeek's NextN layer 2
    to ``model.decoder``, EAGLE-3's ``layers.0`` to ``model.midlayer``): the error names the checkpoint's."""
    found, scales = loader_observed(name, "legacy, differing", True)
    q_a, kv_a = (name for name in scales if name.endswith(".weight_global_scale"))
    assert found["error"] == (
        f"FusedScalesDifferError: {fused}.weight_global_scale: SGLang fuses 2 layers ({q_a} and {kv_a}) into one, "
        f"which takes one per-tensor scale, but theirs differ ({scales[q_a]!r}, {scales[kv_a]!r}); no one value is "
        "right for all of them: quantize them with a shared global scale (llm-compressor does)"
    )


@pytest.mark.parametrize("form", ["legacy", "format2"])
def test_longcat_s_nextn_loader_drops_an_nvfp4_mtp_layer_whatever_the_shape_of_its_scales(loader_observed, form):
    """docs/sglang.md: it loads, its fused layer's scales left as SGLang initialized them."""
    found, scales = loader_observed("longcat-flash-nextn", form, False)
    assert found["architecture"] == "LongcatFlashForCausalLMNextN"
    assert outcome(found, scales) == "loads, scales not the checkpoint's"


@pytest.mark.parametrize(
    ("name", "architecture"),
    [
        ("deepseek-v3-nextn", "DeepseekV3ForCausalLMNextN"),
        ("glm4-moe-lite-nextn", "Glm4MoeLiteForCausalLMNextN"),
        ("kimi-k25-eagle3", "Eagle3DeepseekV2ForCausalLM"),
    ],
)
def test_a_draft_is_loaded_as_the_class_sglang_makes_of_its_config_s(loader_observed, name, architecture):
    """What its observations are recorded as (conftest.py): a NextN draft's class is the one SGLang makes of its
    target's, which the checkpoint's config.json does not name; EAGLE-3's config names its own."""
    assert loader_observed(name, "legacy", False)[0]["architecture"] == architecture


@pytest.mark.parametrize("fix", FIXES)
@pytest.mark.parametrize(
    ("draft", "target"), [("deepseek-v3-nextn", "deepseek-v3"), ("glm4-moe-lite-nextn", "glm4-moe-lite")]
)
def test_a_nextn_draft_does_with_each_form_what_its_target_s_loader_does(loader_observed, draft, target, fix):
    """Why ``check`` judges a checkpoint by its target's class alone (``scalar_scales.consumers.of_checkpoint``):
    SGLang loads a NextN draft from its target's checkpoint, and does with it what it does with the target."""
    drafted, targeted = (
        [outcome(*loader_observed(name, form, FIXES[fix])) for form in FORMS] for name in (draft, target)
    )
    assert drafted == targeted
