"""Where vLLM's NVFP4 kernel choice refuses on the CPU, choose the emulation instead, and say so once."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from vllm_patch.platform_gate import EMULATION_SWITCH, current_platform, should_emulate
from vllm_patch.vllm_logging import vllm_logger

__all__ = ["emulate_on_refusal"]


def emulate_on_refusal(refusal: type[Exception], emulated: Callable[..., Any]) -> Callable[[Callable], Callable]:
    """A wrapper factory for one of vLLM's NVFP4 kernel choices: where it raises ``refusal`` on the CPU, call
    ``emulated`` with the same arguments instead.

    Anywhere else (another platform, or the emulation switched off) vLLM's
    error stands.
    """

    def wrap(choose: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(choose)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return choose(*args, **kwargs)
            except refusal:
                if not should_emulate(current_platform()):
                    raise
                _warn_once()
                return emulated(*args, **kwargs)

        return wrapper

    return wrap


def _warn_once() -> None:
    vllm_logger().warning_once(
        "scalar-scales: vLLM has no NVFP4 kernel on the CPU; emulating NVFP4 (dequantized weights, "
        "compressed-tensors activation fake-quant). %s=0 turns this off.",
        EMULATION_SWITCH,
    )
