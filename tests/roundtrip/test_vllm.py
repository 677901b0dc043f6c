"""Consumer: vLLM's MoE layer (0.32 `RoutedExperts`, 0.23 `FusedMoE`), with and without the plugin.

Every MoE layer of each artifact is built as a real vLLM layer with the
artifact's compressed-tensors config, and every expert tensor (packed
weights, group scales, both global scales) loads through vLLM's expert
mapping and real ``weight_loader``; the layer's global scales are then
compared with the experts' values on disk (the attention projections'
scales belong to vLLM's linear layers, not to this loader). Runs in the serving and legacy-vllm
environments.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="the vLLM consumer runs in the serving and legacy-vllm environments")

from scalar_scales_testkit import vllm_layers

vllm_layers.select_cpu_platform()

import torch  # noqa: E402
import vllm  # noqa: E402

import vllm_patch  # noqa: E402
from scalar_scales.nvfp4 import is_global_scale  # noqa: E402
from scalar_scales_testkit.roundtrip import (  # noqa: E402
    Artifact,
    Result,
    error_line,
    global_scales_on_disk,
    recorded_loads,
    same_values,
    scales_digest,
)

LOADER = "RoutedExperts" if vllm_layers.is_routed_experts() else "FusedMoE"
CONSUMER = f"vLLM {vllm.__version__} {LOADER}"
FIXES = {False: "none", True: "scalar_scales plugin"}


def load(artifact: Artifact, plugin: bool) -> Result:
    result = Result(CONSUMER, FIXES[plugin], artifact, loads=False, scales_scope="expert global scales")
    vllm_patch.apply() if plugin else vllm_patch.revert()
    scales: dict[str, torch.Tensor] = {}
    try:
        for prefix in vllm_layers.moe_layers(artifact.path):
            layer = vllm_layers.build_moe_layer(artifact.path, prefix)
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
def test_loaded_scale_values_are_identical_across_the_four_forms(loaded, family, plugin):
    assert len({loaded(artifact, plugin).scales_digest for artifact in family}) == 1
