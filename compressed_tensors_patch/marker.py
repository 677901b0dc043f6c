"""The ``quantization_config.format_version`` marker, derived from what is on disk.

Every writer we patch (llm-compressor's ``save_pretrained`` wrapper through
``ModelCompressor.update_config``, and its model-free path) finishes by writing
``config.json``. Right after, we read the headers of the shards it just wrote
and declare format 2 only if every global scale there is 0-D. The marker is
derived from the files, never remembered, so it cannot disagree with them: a
model that was already compressed in memory before the patch was applied is
written as legacy and declared legacy.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from scalar_scales.files import replaced
from scalar_scales.nvfp4 import FORMAT_VERSION_KEY, SCALAR_FORMAT_VERSION, is_global_scale
from scalar_scales.sources import CONFIG_NAME, read_config, read_headers

__all__ = ["stamp_format_version", "written_format_version"]


def written_format_version(save_directory: str | os.PathLike[str]) -> int | None:
    """2 if the shards hold global scales and all are 0-D, None (legacy or none) otherwise."""
    shapes = [
        shape
        for header in read_headers(save_directory)
        for name, shape in zip(header.names, header.shapes, strict=True)
        if is_global_scale(name)
    ]
    if shapes and all(shape == () for shape in shapes):
        return SCALAR_FORMAT_VERSION
    return None


def stamp_format_version(save_directory: str | os.PathLike[str]) -> None:
    """Make ``config.json`` declare the scale layout its shards have; leave it untouched otherwise.

    The writer wrote this file a moment ago, in compressed-tensors' layout
    (indent 2, sorted keys), so it is written again in that layout: the file
    is then the one compressed-tensors writes natively with the marker. The
    rewrite is atomic but not fsynced: it follows the writer's own plain,
    unsynced write of the same file, so syncing ours would add no guarantee.
    """
    config = read_config(save_directory)
    quantization_config = (config or {}).get("quantization_config")
    if not isinstance(quantization_config, dict):
        return
    version = written_format_version(save_directory)
    if quantization_config.get(FORMAT_VERSION_KEY) == version:
        return
    if version is None:
        del quantization_config[FORMAT_VERSION_KEY]
    else:
        quantization_config[FORMAT_VERSION_KEY] = version
    with replaced(Path(save_directory) / CONFIG_NAME, durable=False) as f:
        f.write(json.dumps(config, indent=2, sort_keys=True).encode("utf-8"))
