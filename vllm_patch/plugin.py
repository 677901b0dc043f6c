"""The plugin's registration, which vLLM runs in every process it starts: cheap, idempotent, never raising.

``register`` only registers. Each patch goes in once vLLM imports the module
it patches, in the processes that import it: the loader patch once vLLM
imports its MoE loader, and, on the CPU platform only, the NVFP4 emulation
once vLLM imports its NVFP4 code. So a front-end process that never loads a
model patches nothing, and a GPU process never imports the emulation or
registers its torch ops. Whatever goes wrong is one warning line through
vLLM's logger, never an error in vLLM's start. Nothing here imports torch: the
loader patches (:mod:`vllm_patch.loaders`) are imported by :func:`apply`, once
vLLM has imported its MoE loader, so that where vLLM or torch is not
installed, importing the plugin and registering it do nothing, quietly.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

from scalar_scales.environment import switch
from scalar_scales.import_hook import once_imported
from scalar_scales.patching import ALLOW_UNTESTED_ENV, UnsupportedUpstreamError
from vllm_patch.platform_gate import current_platform, should_emulate
from vllm_patch.targets import LOADER_MODULES, emulated_modules
from vllm_patch.vllm_logging import vllm_logger
from vllm_patch.vllm_version import vllm_version

__all__ = ["ENTRY_POINT", "apply", "apply_emulation", "is_applied", "register", "revert"]

ENTRY_POINT = "scalar_scales"
"""Our name in ``vllm.general_plugins``, the one ``VLLM_PLUGINS`` lists."""
_EMULATION_PACKAGE = "vllm_patch.nvfp4_emulation"
_LOADERS = "vllm_patch.loaders"


def register() -> None:
    """vLLM's plugin hook: ask to patch each vLLM module once it is imported (see the module's docstring).

    ``VLLM_PLUGINS`` is read through vLLM's own parsing, so a direct call
    honours it as vLLM does.
    """
    try:
        import vllm.envs
    except ModuleNotFoundError:  # no vLLM here (or no torch, which it imports): nothing to patch
        return
    try:
        allowed = vllm.envs.VLLM_PLUGINS
        if allowed is not None and ENTRY_POINT not in allowed:
            return
        emulating = should_emulate(current_platform())  # a switch set wrong refuses before anything is hooked
        switch(ALLOW_UNTESTED_ENV)
        once_imported(LOADER_MODULES, _never_raising(apply, "could not patch the MoE loader"))
        if emulating:
            for module in emulated_modules(vllm_version()):
                once_imported([module], functools.partial(apply_emulation, module))
    except Exception as error:  # reported, never raised into vLLM's start
        vllm_logger().warning("scalar-scales: vLLM %s: not registered (%s); nothing patched", vllm_version(), error)


def _never_raising(action: Callable[[], Any], failure: str) -> Callable[[], None]:
    """``action``, for a callback inside vLLM's own import: a failure is one warning line, never an error."""

    @functools.wraps(action)
    def run() -> None:
        try:
            action()
        except Exception as error:  # reported, never raised into vLLM's import
            vllm_logger().warning("scalar-scales: vLLM %s: %s (%s); nothing patched", vllm_version(), failure, error)

    return run


def apply() -> list[str]:
    """Patch the installed vLLM's MoE loader, with one log line; return what is patched (empty if nothing could
    be, which a warning line says once)."""
    from vllm_patch.loaders import LOADER_PATCHES

    if LOADER_PATCHES.refusal is not None:
        return []
    try:
        upstream = LOADER_PATCHES.apply()
    except UnsupportedUpstreamError as refusal:
        vllm_logger().warning("scalar-scales: vLLM %s: %s", vllm_version(), refusal)
        return []
    targets = LOADER_PATCHES.applied_targets()
    if upstream is not None:
        owner = targets[0].split(".")[-2]
        vllm_logger().info(
            "scalar-scales: vLLM %s %s: patched %s", vllm_version(), owner, LOADER_PATCHES.applied_reasons()
        )
    return targets


def apply_emulation(module: str) -> None:
    """Patch one vLLM module (of ``targets.emulated_modules``) for NVFP4 emulation; never raises into vLLM.

    The wrappers act only where vLLM refuses NVFP4 on the CPU platform. A
    vLLM release outside the set's declaration, or one whose NVFP4 code we do
    not recognise, gets a warning line and no emulation: vLLM's own error
    stands.
    """
    try:
        from vllm_patch.nvfp4_emulation import EMULATION_PATCHES

        patches = EMULATION_PATCHES[module]
        if patches.refusal is None:
            patches.apply()
    except UnsupportedUpstreamError as refusal:
        vllm_logger().warning("scalar-scales: vLLM %s: %s; no NVFP4 emulation", vllm_version(), refusal)
    except Exception as error:  # reported, never raised into vLLM's import
        vllm_logger().warning(
            "scalar-scales: vLLM %s: NVFP4 code not recognised (%s); no NVFP4 emulation", vllm_version(), error
        )


def revert() -> None:
    """Restore every patched vLLM function exactly (for side-by-side tests and benchmarks); nothing to do where
    the patches were never imported."""
    loaders = sys.modules.get(_LOADERS)
    if loaders is not None:
        loaders.LOADER_PATCHES.revert()
    emulation = sys.modules.get(_EMULATION_PACKAGE)
    if emulation is not None:
        for patches in emulation.EMULATION_PATCHES.values():
            patches.revert()


def is_applied() -> bool:
    """Whether the MoE loader is patched."""
    loaders = sys.modules.get(_LOADERS)  # never applied where not imported: importing it would import torch
    return loaders is not None and bool(loaders.LOADER_PATCHES.is_applied())
