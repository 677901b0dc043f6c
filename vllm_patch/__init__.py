"""Consumer-side fix: a vLLM general plugin (entry point ``vllm.general_plugins: scalar_scales``).

This release registers the plugin and patches no vLLM loader yet: the
``_to_scalar`` tolerance for legacy (1,) per-tensor scales on vLLM's MoE
loaders is tracked separately. ``register`` says so in its one log line, so
a server log never suggests a protection that is not there.
"""

from __future__ import annotations

import logging

__all__ = ["register"]

_logger = logging.getLogger("scalar_scales")


def register() -> None:
    """vLLM calls this once per process; it must be cheap and idempotent."""
    _logger.info("scalar-scales: vllm_patch loaded; this release patches no vLLM loader")
