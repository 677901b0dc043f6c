"""The rules that hold the index to the shards (NV5): ``migrate`` refuses a checkpoint with any of these."""

from __future__ import annotations

from collections.abc import Iterator

from scalar_scales.doctor.examples import Example, IndexAdds, IndexDrops
from scalar_scales.doctor.rules import Found, checkpoint_rule
from scalar_scales.doctor.view import CheckpointView

__all__ = ["index_names_missing_tensor", "tensor_not_in_index"]


@checkpoint_rule(
    "NV501",
    "index-names-missing-tensor",
    "warning",
    "none",
    summary="the index names a tensor its shard does not hold",
    examples=(
        Example(
            "index-names-a-missing-tensor",
            "the index lists a tensor no shard holds (a shard re-saved without it)",
            (IndexAdds("{module}.down_proj.bias", beside="{module}.down_proj.{weight}"),),
        ),
    ),
    explanation="""
        `model.safetensors.index.json` names a tensor its shard does
        not hold. vLLM loads every tensor of the files the index lists, so it serves
        the checkpoint as without the entry; a tool that looks tensors up by the
        index's names does not find it. `migrate` refuses such a checkpoint (exit 2).
        """,
)
def index_names_missing_tensor(checkpoint: CheckpointView) -> Iterator[Found]:
    why = (
        "vLLM loads every tensor of the files the index lists, so it serves the checkpoint as without the entry; a "
        "tool that looks tensors up by the index's names does not find it"
    )
    for found in checkpoint.scan.index_disagreements:
        if found.listed:
            yield found.tensor, str(found.file), found.detail, why


@checkpoint_rule(
    "NV502",
    "tensor-not-in-index",
    "warning",
    "none",
    summary="a shard holds a tensor the index does not name",
    examples=(
        Example("index-forgot-a-tensor", "a tensor the index forgot", (IndexDrops("{module}.up_proj.{weight}"),)),
    ),
    explanation="""
        A shard holds a tensor the index does not name. vLLM loads
        it anyway; a tool that reads only what the index names leaves it out.
        `migrate` refuses such a checkpoint (exit 2).
        """,
)
def tensor_not_in_index(checkpoint: CheckpointView) -> Iterator[Found]:
    why = "vLLM loads it anyway; a tool that reads only what the index names leaves it out"
    for found in checkpoint.scan.index_disagreements:
        if not found.listed:
            yield found.tensor, str(found.file), found.detail, why
