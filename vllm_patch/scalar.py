"""``to_scalar``: a per-tensor scale as the 0-D tensor a scalar slot takes.

llm-compressor writes per-tensor scales as shape (1,); a loader that does
``slot.copy_(loaded)`` into a 0-D slot fails with ``output with shape []
doesn't match the broadcast shape [1]`` (vLLM issue 43297). Any single-element
tensor is accepted. Anything else is a real error, and vLLM's own message for
it (``shape '[]' is invalid for input of size 2``) names neither the weight
nor the expert, so ours does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a tensor's own methods are all it calls: importing the plugin imports no torch
    import torch

__all__ = ["ScaleShapeError", "to_scalar"]


class ScaleShapeError(ValueError):
    """A per-tensor scale that does not hold exactly one value."""


def to_scalar(
    tensor: torch.Tensor, *, name: str | None = None, expert_id: int | None = None, shard_id: str | None = None
) -> torch.Tensor:
    """``tensor`` as a 0-D tensor (a view, no copy), for any single-element shape: (), (1,), (1, 1)."""
    if tensor.numel() != 1:
        where = ", ".join(
            part
            for part in (
                f"weight {name}" if name is not None else "a per-tensor scale",
                f"expert {expert_id}" if expert_id is not None else None,
                f"shard {shard_id}" if shard_id is not None else None,
            )
            if part
        )
        raise ScaleShapeError(
            f"{where}: a per-tensor scale must hold exactly one value, got shape {tuple(tensor.shape)} "
            f"({tensor.numel()} values)"
        )
    return tensor.reshape(())
