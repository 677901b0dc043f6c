"""upstream/sglang.patch, proven on SGLang 0.5.23's sources patched with it, without the plugin.

Run by scripts/verify_sglang_patch.sh, which puts the patched tree first on
the path and names it in ``SCALAR_SCALES_SGLANG_UPSTREAM``; skipped elsewhere.
The same artifacts as test_sglang_loading.py, loaded the same way.
"""

from __future__ import annotations

import os

import pytest

from scalar_scales_testkit.sglang_cpu import MODELS, fused_scales_on_disk, with_kv_a_scale_doubled
from scalar_scales_testkit.sglang_loaders import FORMS, LOADERS, documented, marked, outcome

PATCHED = os.environ.get("SCALAR_SCALES_SGLANG_UPSTREAM")
if not PATCHED:
    pytest.skip("SGLang patched with upstream/sglang.patch: scripts/verify_sglang_patch.sh", allow_module_level=True)

pytestmark = pytest.mark.upstream


def test_the_sglang_loaded_is_the_patched_source_and_the_plugin_is_not_applied(load, artifact):
    found = load(artifact("deepseek-v3", "format2"))
    assert found["sglang"].startswith(PATCHED) and not found["patched"]


@pytest.mark.parametrize("toy", MODELS)
@pytest.mark.parametrize("form", ["legacy", "format2", "legacy-migrated", "format2-to-legacy"])
def test_every_form_loads_with_the_scales_on_disk(load, artifact, toy, form):
    found = load(path := artifact(toy, form))
    assert found["loaded"] and not found["patched"]
    assert found["fused"] == fused_scales_on_disk(path, "q_a_proj") == fused_scales_on_disk(path, "kv_a_proj_with_mqa")


@pytest.mark.parametrize("toy", MODELS)
@pytest.mark.parametrize("form", ["legacy", "format2"])
def test_differing_fused_global_scales_are_a_named_error(load, artifact, copied, toy, form):
    q_a, kv_a = with_kv_a_scale_doubled(path := copied(artifact(toy, form)))
    found = load(path)
    assert not found["loaded"] and found["error"] == (
        f"ValueError: model.layers.0.self_attn.q_a_proj.weight_global_scale ({q_a}) and "
        f"model.layers.0.self_attn.kv_a_proj_with_mqa.weight_global_scale ({kv_a}) differ, but they are fused "
        "into one layer that takes one per-tensor scale; quantize them with a shared scale"
    )


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", LOADERS)
def test_each_fusing_loader_does_with_each_form_what_the_docs_say(load, loader_checkpoint, name, form):
    """docs/sglang.md's rows of the upstream patch, which say every form loads the checkpoint's scale or is
    refused by name (test_sglang_loaders.py)."""
    path, scales = loader_checkpoint(name, form)
    found = load(path, draft=LOADERS[name].draft)
    assert not found["patched"]
    assert marked(outcome(found, scales)) == documented(name, "upstream patch")[form], found["error"]


def test_the_patch_s_helper_fuses_single_values_of_either_shape_and_refuses_three_that_differ_naming_each():
    """What dots.3's loader calls with its three parts (no checkpoint of it loads on the CPU here)."""
    import torch
    from sglang.srt.model_loader.weight_utils import fuse_parts, fuse_per_tensor_scales

    names = ["q_a_proj.weight_global_scale", "kv_a_proj_with_mqa.weight_global_scale", "g_proj.weight_global_scale"]
    one = fuse_parts(names[:2], [torch.tensor([448.0]), torch.tensor(448.0)])
    assert one.shape == () and one.item() == 448.0
    assert fuse_parts(names[:2], [torch.ones(2, 3), torch.ones(1, 3)]).shape == (3, 3)
    with pytest.raises(ValueError) as refused:
        fuse_per_tensor_scales(names, [torch.tensor([448.0]), torch.tensor([448.0]), torch.tensor([896.0])])
    assert str(refused.value) == (
        "q_a_proj.weight_global_scale (448.0), kv_a_proj_with_mqa.weight_global_scale (448.0) and "
        "g_proj.weight_global_scale (896.0) differ, but they are fused into one layer that takes one per-tensor "
        "scale; quantize them with a shared scale"
    )


@pytest.mark.parametrize("name", ["deepseek-v3-nextn", "glm4-moe-lite-nextn", "kimi-k25-eagle3", "kimi-k3"])
def test_differing_scales_are_refused_naming_the_checkpoint_s_tensors(loader_observed, name):
    """A draft's loader renames the checkpoint's layer before it fuses (DeepSeek's and GLM's NextN layer 2 to
    ``model.decoder``, EAGLE-3's ``layers.0`` to ``model.midlayer``): the error names the checkpoint's tensors."""
    found, scales = loader_observed(name, "legacy, differing", False)
    q_a, kv_a = (name for name in scales if name.endswith(".weight_global_scale"))
    assert found["error"] == (
        f"ValueError: {q_a} ({scales[q_a]}) and {kv_a} ({scales[kv_a]}) differ, but they are fused into one layer "
        "that takes one per-tensor scale; quantize them with a shared scale"
    )
