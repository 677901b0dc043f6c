"""The SGLang plugin's patch: applied once however often it is asked, reverted exactly, refused where untested."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import sglang_patch
from sglang_patch import loaders

OWNERS = {
    "sglang.srt.layers.linear.ReplicatedLinear": "weight_loader",
    "sglang.srt.model_loader.loader.DefaultModelLoader": "load_weights_only",
}


def originals():
    from scalar_scales.patching import import_dotted

    return {owner: vars(import_dotted(owner))[attribute] for owner, attribute in OWNERS.items()}


@pytest.fixture(autouse=True)
def reverted():
    sglang_patch.revert()
    yield
    sglang_patch.revert()


def test_apply_patches_both_functions_once_however_often_it_is_called():
    before = originals()
    first = sglang_patch.apply()
    patched = originals()
    assert sglang_patch.apply() == first and originals() == patched
    assert sorted(first) == sorted(f"{owner}.{attribute}" for owner, attribute in OWNERS.items())
    assert all(patched[owner] is not before[owner] for owner in OWNERS)


def test_revert_puts_back_the_very_objects_it_replaced():
    before = originals()
    sglang_patch.apply()
    sglang_patch.revert()
    assert all(originals()[owner] is before[owner] for owner in OWNERS) and not sglang_patch.is_applied()


def test_a_release_the_patch_was_not_tested_on_is_refused_with_nothing_patched(monkeypatch, caplog):
    """The installed 0.5.23 against a declaration of 0.5.22 only: one warning line, in the shape every patch set
    refuses in (scalar_scales.patching)."""
    before = originals()
    monkeypatch.setitem(loaders.LOADER_PATCHES.supports, "sglang", "==0.5.22")
    assert sglang_patch.apply() == []
    assert originals() == before
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "sglang.scalar_scales"]
    assert warning == (
        "scalar-scales: SGLang 0.5.23: sglang_patch loader supports sglang ==0.5.22; sglang 0.5.23 is installed, "
        "so nothing was patched (SCALAR_SCALES_ALLOW_UNTESTED_UPSTREAM=1 tries anyway)"
    )


REGISTER_THEN_IMPORT = """
import json, sys
import sglang_patch
sglang_patch.register()
sglang_patch.register()
imported = sglang_patch.LOADER_MODULE in sys.modules
import sglang.srt.model_loader.loader
from sglang.srt.layers.linear import ReplicatedLinear
wrapped = vars(ReplicatedLinear)["weight_loader"]
print(json.dumps([imported, sglang_patch.is_applied(), hasattr(wrapped.__wrapped__, "__wrapped__")]))
"""


def test_register_imports_no_loader_and_patches_once_when_sglang_imports_it_however_often_it_is_called():
    done = subprocess.run([sys.executable, "-c", REGISTER_THEN_IMPORT], capture_output=True, text=True, timeout=300)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [False, True, False], done.stderr[-2000:]


def test_register_never_raises_where_it_patches_nothing(monkeypatch, caplog):
    import sglang.srt.model_loader.loader  # noqa: F401

    monkeypatch.setitem(loaders.LOADER_PATCHES.supports, "sglang", "==0.5.22")
    sglang_patch.register()
    assert not sglang_patch.is_applied() and "nothing was patched" in caplog.text


def test_a_gguf_parameter_not_yet_materialized_passes_through_to_sglang_s_loader():
    import torch
    from sglang.srt.layers.linear import ReplicatedLinear
    from sglang.srt.layers.quantization.gguf import GGUFUninitializedParameter

    sglang_patch.apply()
    layer = ReplicatedLinear(4, 4, bias=False, params_dtype=torch.float32)
    param = GGUFUninitializedParameter(requires_grad=False)
    param.is_gguf_weight = True
    layer.weight_loader(param, torch.ones(4, 4))
    assert torch.equal(param.data, torch.ones(4, 4))


def test_modelopt_parts_whose_weight_scale_2_differ_are_refused_by_the_checkpoint_s_names():
    """ModelOpt writes a layer's weight global scale 0-D as ``weight_scale_2``, and DeepSeek's loader fuses two 0-D
    parts by keeping ``q_a_proj``'s: through the patched ``load_weights_only``, parts that differ are refused."""
    import torch
    from sglang.srt.layers.linear import ReplicatedLinear
    from sglang.srt.model_loader.loader import DefaultModelLoader

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fused_qkv_a_proj_with_mqa = ReplicatedLinear(4, 4, bias=False, params_dtype=torch.float32)

        def load_weights(self, weights):
            list(weights)

    parts = [
        (f"model.layers.0.self_attn.{part}.weight_scale_2", torch.tensor(value))
        for part, value in (("q_a_proj", 448.0), ("kv_a_proj_with_mqa", 896.0))
    ]
    sglang_patch.apply()
    with pytest.raises(sglang_patch.FusedScalesDifferError) as refused:
        DefaultModelLoader.load_weights_only(Model(), parts, torch.device("cpu"))
    assert str(refused.value).startswith(
        "model.layers.0.self_attn.fused_qkv_a_proj_with_mqa.weight_scale_2: SGLang fuses 2 layers "
        "(model.layers.0.self_attn.q_a_proj.weight_scale_2 and model.layers.0.self_attn.kv_a_proj_with_mqa."
        "weight_scale_2) into one, which takes one per-tensor scale, but theirs differ (448.0, 896.0)"
    )


def test_three_fused_parts_whose_scales_differ_are_refused_by_the_checkpoint_s_names():
    """dots.3 fuses ``g_proj`` too (``fused_qkv_a_g_proj_with_mqa``; no checkpoint of it loads on the CPU here):
    through the patched ``load_weights_only``, a model holding that layer is given parts whose weight global
    scales are equal, then parts where ``g_proj``'s differs."""
    import torch
    from sglang.srt.layers.linear import ReplicatedLinear
    from sglang.srt.model_loader.loader import DefaultModelLoader

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fused_qkv_a_g_proj_with_mqa = ReplicatedLinear(4, 4, bias=False, params_dtype=torch.float32)
            self.loaded = []

        def load_weights(self, weights):
            self.loaded += [name for name, _ in weights]

    def parts(g_proj):
        return [
            (f"model.layers.0.self_attn.{part}.weight_global_scale", torch.tensor([value]))
            for part, value in (("q_a_proj", 448.0), ("kv_a_proj_with_mqa", 448.0), ("g_proj", g_proj))
        ]

    sglang_patch.apply()
    model = Model()
    DefaultModelLoader.load_weights_only(model, parts(448.0), torch.device("cpu"))
    assert len(model.loaded) == 3
    with pytest.raises(sglang_patch.FusedScalesDifferError) as refused:
        DefaultModelLoader.load_weights_only(Model(), parts(896.0), torch.device("cpu"))
    assert str(refused.value).startswith(
        "model.layers.0.self_attn.fused_qkv_a_g_proj_with_mqa.weight_global_scale: SGLang fuses 3 layers "
        "(model.layers.0.self_attn.q_a_proj.weight_global_scale, model.layers.0.self_attn.kv_a_proj_with_mqa."
        "weight_global_scale and model.layers.0.self_attn.g_proj.weight_global_scale) into one, which takes one "
        "per-tensor scale, but theirs differ (448.0, 448.0, 896.0)"
    )
