"""The plugin: discovered through vLLM's entry point, switched off by VLLM_PLUGINS, idempotent, exact revert."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from importlib import metadata

import pytest

import vllm_patch
from scalar_scales.patching import import_dotted
from scalar_scales_testkit.vllm_layers import is_routed_experts
from vllm_patch.loaders import plan_loader_patches

# vLLM 0.32 configures its log handlers when an engine starts; a bare discovery needs one to show INFO.
DISCOVER = (
    "import logging, sys; logging.basicConfig(level=logging.INFO)\n"
    "from scalar_scales_testkit import vllm_layers; vllm_layers.select_cpu_platform()\n"
    "from vllm.plugins import load_general_plugins\n"
    "load_general_plugins()\n"
    "import vllm_patch; print('applied before the loader is imported:', vllm_patch.is_applied())\n"
    "print('loader imported by register:', any(m in sys.modules for m in vllm_patch.LOADER_MODULES))\n"
    "import vllm.model_executor.layers.fused_moe.layer\n"
    "print('applied:', vllm_patch.is_applied())\n"
)


def discover(**env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", DISCOVER], env={**os.environ, **env}, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout + result.stderr


def test_the_entry_point_is_in_vllm_general_plugins():
    (entry,) = [e for e in metadata.entry_points(group="vllm.general_plugins") if e.name == vllm_patch.ENTRY_POINT]
    assert entry.value == "vllm_patch:register"


def test_vllm_discovers_the_plugin_and_it_patches_the_loader_once_imported():
    output = discover()
    assert "applied: True" in output
    assert output.count("scalar-scales: vLLM") == 1


def test_registering_imports_no_loader_and_patches_nothing_yet():
    """register() runs in every vLLM process, the front end too: it must not import the MoE stack."""
    output = discover()
    assert "loader imported by register: False" in output
    assert "applied before the loader is imported: False" in output


def test_vllm_plugins_without_us_patches_nothing():
    output = discover(VLLM_PLUGINS="some_other_plugin")
    assert "applied: False" in output
    assert "scalar-scales" not in output


def test_register_logs_one_line_with_the_version_and_each_method(caplog):
    with caplog.at_level(logging.INFO, logger="vllm.scalar_scales"):
        vllm_patch.register()
        vllm_patch.register()
    (record,) = [r for r in caplog.records if r.name == "vllm.scalar_scales"]
    message = record.getMessage()
    owner = "RoutedExperts" if is_routed_experts() else "FusedMoE"
    assert message.startswith("scalar-scales: vLLM 0.")
    assert f" {owner}: patched _load_per_tensor_weight_scale, _load_single_value, " in message
    assert "_load_per_channel_weight_scale, _load_w2" in message


def test_register_is_idempotent():
    vllm_patch.register()
    first = [vars(import_dotted(p.owner))[p.attribute] for p in plan_loader_patches().patches]
    vllm_patch.register()
    assert [vars(import_dotted(p.owner))[p.attribute] for p in plan_loader_patches().patches] == first


def test_a_path_vllm_already_coerces_keeps_upstream_s_coercion_and_is_reported():
    """>= 0.24 reshapes per-tensor scales through _to_scalar: that coercion stays upstream's, and the plan says so."""
    plan = plan_loader_patches()
    owner = import_dotted(plan.owner)
    to_scalar_before = vars(owner).get("_to_scalar")
    vllm_patch.apply()
    assert vars(owner).get("_to_scalar") is to_scalar_before
    expected = ["_load_per_tensor_weight_scale"] if is_routed_experts() else []
    assert plan.already_coerced == expected


def test_revert_restores_every_method_exactly():
    plan = plan_loader_patches()
    owner = import_dotted(plan.owner)
    before = dict(vars(owner))
    vllm_patch.apply()
    vllm_patch.revert()
    assert all(vars(owner)[p.attribute] is before[p.attribute] for p in plan.patches)


@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
def test_to_scalar_returns_0d_for_any_single_element(shape):
    import torch

    assert vllm_patch.to_scalar(torch.full(shape, 3.0)).shape == ()


def test_to_scalar_names_weight_expert_shard_and_shape():
    import torch

    with pytest.raises(vllm_patch.ScaleShapeError) as error:
        vllm_patch.to_scalar(torch.ones(2), name="w13_weight_global_scale", expert_id=5, shard_id="w3")
    assert str(error.value) == (
        "weight w13_weight_global_scale, expert 5, shard w3: a per-tensor scale must hold exactly one value, "
        "got shape (2,) (2 values)"
    )


def test_a_loader_we_do_not_recognise_gets_a_warning_and_no_patch(monkeypatch, caplog):
    """The structure check, run against a real vLLM class that is not a MoE loader."""
    import vllm_patch.loaders

    linear = "vllm.model_executor.layers.linear.LinearBase"
    monkeypatch.setattr(vllm_patch.loaders, "_MOE_CLASSES", (linear,))
    before = dict(vars(import_dotted(linear)))
    with caplog.at_level(logging.WARNING, logger="vllm.scalar_scales"):
        assert vllm_patch.apply() == []
        assert vllm_patch.apply() == []
    assert not vllm_patch.is_applied()
    (record,) = caplog.records
    assert "MoE loader not recognised" in record.getMessage() and "nothing patched" in record.getMessage()
    assert dict(vars(import_dotted(linear))) == before


def test_a_loader_with_one_method_s_signature_changed_gets_one_warning_line_and_no_patch(monkeypatch, caplog):
    """A real vLLM MoE loader class, subclassed with ``_load_w2`` taking one parameter more."""
    import sys
    import types

    import vllm_patch.loaders

    plan = plan_loader_patches()
    real = import_dotted(plan.owner)
    module = types.ModuleType("scalar_scales_changed_vllm")

    def _load_w2(self, expert_data, shard_dim, loaded_weight, tp_rank, load_full=False, new_flag=None):  # noqa: ANN001
        return real._load_w2(self, expert_data, shard_dim, loaded_weight, tp_rank, load_full)

    module.ChangedLoader = type("ChangedLoader", (real,), {"_load_w2": _load_w2})
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(vllm_patch.loaders, "_MOE_CLASSES", (f"{module.__name__}.ChangedLoader",))
    with caplog.at_level(logging.WARNING, logger="vllm.scalar_scales"):
        assert vllm_patch.apply() == []
        assert vllm_patch.apply() == []
    assert not vllm_patch.is_applied()
    (record,) = [r for r in caplog.records if r.name == "vllm.scalar_scales"]
    assert "MoE loader not recognised" in record.getMessage()
    assert vars(module.ChangedLoader)["_load_w2"] is _load_w2


def test_the_emulation_is_chosen_on_the_cpu_platform_only():
    from vllm.platforms.cpu import CpuPlatform
    from vllm.platforms.interface import UnspecifiedPlatform

    from vllm_patch.nvfp4_emulation import should_emulate

    assert should_emulate(CpuPlatform())
    assert not should_emulate(UnspecifiedPlatform())
