"""Where a checkpoint's shards come from: this machine's files (:mod:`.local`) or a Hub repository read by
range requests (:mod:`.hub`), behind one protocol (:class:`ShardSource`), and what a checkpoint's layout and
config declare (:mod:`.checkpoint`)."""

from __future__ import annotations

import os

from scalar_scales.sources.checkpoint import (
    CONFIG_NAME,
    INDEX_NAME,
    SINGLE_FILE_NAME,
    UNIQUE_KEYS,
    CheckpointLocation,
    Declaration,
    OpenedCheckpoint,
    ShardSource,
    declaration,
    shard_name,
    shard_names,
    weight_map_of,
)
from scalar_scales.sources.hub import HUB_PREFIX, HubShards, RemoteCheckpoint, is_hub_address, open_hub_checkpoint
from scalar_scales.sources.local import (
    LOCAL_SHARDS,
    Checkpoint,
    LocalShards,
    open_local,
    read_config,
    read_headers,
    resolve_checkpoint,
)

__all__ = [
    "CONFIG_NAME",
    "HUB_PREFIX",
    "INDEX_NAME",
    "LOCAL_SHARDS",
    "SINGLE_FILE_NAME",
    "UNIQUE_KEYS",
    "Checkpoint",
    "CheckpointLocation",
    "Declaration",
    "HubShards",
    "LocalShards",
    "OpenedCheckpoint",
    "RemoteCheckpoint",
    "ShardSource",
    "declaration",
    "is_hub_address",
    "open_checkpoint",
    "open_hub_checkpoint",
    "open_local",
    "read_config",
    "read_headers",
    "resolve_checkpoint",
    "shard_name",
    "shard_names",
    "weight_map_of",
]


def open_checkpoint(path: str | os.PathLike[str]) -> OpenedCheckpoint:
    """A local checkpoint (a folder or a ``.safetensors`` file), or ``hf://ORG/NAME[@REVISION]``."""
    if isinstance(path, str) and is_hub_address(path):
        return open_hub_checkpoint(path)
    return open_local(path)
