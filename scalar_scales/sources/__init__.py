"""Where a checkpoint's shards come from: this machine's files (:mod:`.local`) or a Hub repository read by
range requests (:mod:`.hub`), behind one protocol (:class:`ShardSource`); what a checkpoint's layout is
(:mod:`.checkpoint`) and what its configs declare (:mod:`.declaration`).

The Hub's source is imported when first named (:func:`__getattr__`): its
client (``email``, ``socket``, ``datetime``, ...) is a fifth of the command's
imports, and a check of a local folder never uses it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from scalar_scales.sources.checkpoint import (
    CONFIG_NAME,
    DIFFUSERS_INDEX_NAME,
    DIFFUSERS_SINGLE_FILE_NAME,
    INDEX_NAME,
    INDEX_NAMES,
    SINGLE_FILE_NAME,
    UNIQUE_KEYS,
    CheckpointLocation,
    OpenedCheckpoint,
    ShardSource,
    index_name,
    shard_name,
    shard_names,
    weight_map_of,
)
from scalar_scales.sources.declaration import MODELOPT_CONFIG_NAME, Declaration, Group, declaration
from scalar_scales.sources.hub_address import HUB_PREFIX, is_hub_address
from scalar_scales.sources.local import (
    LOCAL_SHARDS,
    Checkpoint,
    LocalShards,
    open_local,
    read_config,
    read_headers,
    refuse_a_shard,
    resolve_checkpoint,
)

if TYPE_CHECKING:
    from scalar_scales.sources.hub import HubShards, RemoteCheckpoint, open_hub_checkpoint

__all__ = [
    "CONFIG_NAME",
    "DIFFUSERS_INDEX_NAME",
    "DIFFUSERS_SINGLE_FILE_NAME",
    "HUB_PREFIX",
    "INDEX_NAME",
    "INDEX_NAMES",
    "LOCAL_SHARDS",
    "MODELOPT_CONFIG_NAME",
    "SINGLE_FILE_NAME",
    "UNIQUE_KEYS",
    "Checkpoint",
    "CheckpointLocation",
    "Declaration",
    "Group",
    "HubShards",
    "LocalShards",
    "OpenedCheckpoint",
    "RemoteCheckpoint",
    "ShardSource",
    "declaration",
    "index_name",
    "is_hub_address",
    "open_checkpoint",
    "open_hub_checkpoint",
    "open_local",
    "read_config",
    "read_headers",
    "refuse_a_shard",
    "resolve_checkpoint",
    "shard_name",
    "shard_names",
    "weight_map_of",
]


def open_checkpoint(path: str | os.PathLike[str]) -> OpenedCheckpoint:
    """A local checkpoint (a folder or a ``.safetensors`` file), or a Hub repository (``hf://ORG/NAME[@REVISION]``,
    or its page's ``https://`` address), for ``check``. A file that is a shard of the checkpoint in its folder is
    refused (:func:`refuse_a_shard`): judged alone, without its config, it passed where its folder's check found
    the very same tensors wrong."""
    if isinstance(path, str) and is_hub_address(path):
        from scalar_scales.sources.hub import open_hub_checkpoint

        return open_hub_checkpoint(path)
    checkpoint = resolve_checkpoint(path)
    refuse_a_shard(checkpoint, "check", "judges a checkpoint's shards together, with its config and index")
    return open_local(checkpoint)


_HUB_NAMES = frozenset({"HubShards", "RemoteCheckpoint", "open_hub_checkpoint"})


def __getattr__(name: str) -> object:
    """The Hub source's names, imported when first asked for."""
    if name in _HUB_NAMES:
        from scalar_scales.sources import hub

        return getattr(hub, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
