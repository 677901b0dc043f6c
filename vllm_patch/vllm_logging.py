"""The plugin logs through vLLM's own logger, so its lines look and go where vLLM's do."""

from __future__ import annotations

import functools
from typing import Any

from vllm_patch.vllm_version import vllm_version

__all__ = ["LOGGER_NAME", "vllm_logger", "warn"]

LOGGER_NAME = "vllm.scalar_scales"
"""Under ``vllm``: vLLM's logging configuration (handlers, format, ``VLLM_LOGGING_LEVEL``) covers it."""


@functools.cache
def vllm_logger() -> Any:
    """vLLM's logger for the plugin, with ``info_once`` and ``warning_once``.

    Imported on first use, not with this package: ``to_scalar`` works without vLLM.
    """
    from vllm.logger import init_logger

    return init_logger(LOGGER_NAME)


def warn(message: str) -> None:
    """One warning line about the installed vLLM, as every line of the plugin's that says something is wrong."""
    vllm_logger().warning("scalar-scales: vLLM %s: %s", vllm_version(), message)
