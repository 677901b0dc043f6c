"""Replacements for the upstream functions the producer patch wraps.

Each factory receives the original object exactly as the owner stores it and
returns a replacement that calls it and changes only what it must. The rows
that install them, with the reason for each, are in ``__init__``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from compressed_tensors_patch.marker import stamp_format_version
from compressed_tensors_patch.scales import (
    as_memory_layout,
    as_written_layout,
    check_global_scales,
    restore_memory_layout_on_first_forward,
)
from scalar_scales.nvfp4 import FORMAT_VERSION_KEY, LEGACY_FORMAT_VERSION, SCALAR_FORMAT_VERSION

if TYPE_CHECKING:  # torch only in annotations: the package imports without it (scales.py says why)
    import torch

__all__ = [
    "wrap_compress",
    "wrap_compress_model",
    "wrap_config_init",
    "wrap_config_to_dict",
    "wrap_decompress",
    "wrap_from_compression_config",
    "wrap_update_config",
]

_write_scalar: ContextVar[bool] = ContextVar("scalar_scales_write_scalar", default=True)
"""Whether ``compress`` emits 0-D global scales. Writers do; a loader follows the checkpoint's marker."""

_LAYOUT_ATTRIBUTE = "_scalar_scales_format_version"


@contextmanager
def _writing_scalar(scalar: bool) -> Iterator[None]:
    token = _write_scalar.set(scalar)
    try:
        yield
    finally:
        _write_scalar.reset(token)


def wrap_compress(original: classmethod) -> classmethod:
    """``NVFP4PackedCompressor.compress``: emit global scales in the format-2 layout.

    Every save path (``save_pretrained``, ``oneshot(output_dir=...)``, the
    model-free path) compresses through this classmethod, and so does
    transformers when it builds the skeleton of a compressed checkpoint it is
    about to load. Only the output changes: calibration never sees it.
    """
    compress = original.__func__

    @functools.wraps(compress)
    def wrapper(cls: type, state_dict: dict[str, Any], scheme: Any) -> dict[str, Any]:
        return as_written_layout(compress(cls, state_dict, scheme), scalar=_write_scalar.get())

    return classmethod(wrapper)


def wrap_decompress(original: classmethod) -> classmethod:
    """``NVFP4PackedCompressor.decompress``: decompress with (1,) global scales.

    This restores the in-memory shape and pins dtype promotion, so legacy and
    format-2 artifacts decompress to bit-identical weights.
    """
    decompress = original.__func__

    @functools.wraps(decompress)
    def wrapper(cls: type, state_dict: dict[str, Any], scheme: Any) -> dict[str, Any]:
        return decompress(cls, as_memory_layout(state_dict), scheme)

    return classmethod(wrapper)


def wrap_compress_model(compress_model: Callable[..., None]) -> Callable[..., None]:
    """``ModelCompressor.compress_model``: validate first, then compress in the layout this compressor writes.

    Validating every global scale by its full name before anything is
    compressed turns a malformed scale into one clear error and no change.
    A compressor made for loading a legacy checkpoint builds a (1,) skeleton.

    Upstream then registers a hook that decompresses the model on its first
    forward pass, with whatever code is installed then: after ``revert()``,
    or outside the ``applied()`` block, the unpatched code, for which a 0-D
    scale decompresses differently. So a hook of ours runs just before it
    and gives the global scales the shape (1,) again: the model, saved or
    loaded from either layout, then decompresses as a legacy one does,
    patched or not. Until then it keeps its compressed (written) layout, so
    a re-save writes what was loaded.
    """

    @functools.wraps(compress_model)
    def wrapper(self: Any, model: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
        check_global_scales(dict(model.named_parameters(remove_duplicate=False)))
        version = getattr(self, _LAYOUT_ATTRIBUTE, SCALAR_FORMAT_VERSION)
        with _writing_scalar(version >= SCALAR_FORMAT_VERSION):
            compress_model(self, model, *args, **kwargs)
        restore_memory_layout_on_first_forward(model)

    return wrapper


def wrap_from_compression_config(original: classmethod) -> classmethod:
    """``ModelCompressor.from_compression_config``: remember the layout of the checkpoint being loaded.

    transformers makes its compressor here and compresses an empty skeleton
    with it before loading weights, so the skeleton must have the shapes
    that are on disk: 0-D for format 2, (1,) for legacy.
    """
    from_compression_config = original.__func__

    @functools.wraps(from_compression_config)
    def wrapper(cls: type, compression_config: Any) -> Any:
        compressor = from_compression_config(cls, compression_config)
        declared = getattr(compression_config, FORMAT_VERSION_KEY, None)
        setattr(compressor, _LAYOUT_ATTRIBUTE, declared or LEGACY_FORMAT_VERSION)
        return compressor

    return classmethod(wrapper)


def wrap_update_config(update_config: Callable[..., None]) -> Callable[..., None]:
    """``ModelCompressor.update_config`` and llm-compressor's model-free ``update_config``.

    Both write ``config.json`` last; we then declare the layout of the shards
    on disk (see ``marker``).
    """

    signature = inspect.signature(update_config)

    @functools.wraps(update_config)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        update_config(*args, **kwargs)
        stamp_format_version(signature.bind(*args, **kwargs).arguments["save_directory"])

    return wrapper


def wrap_config_init(init: Callable[..., None]) -> Callable[..., None]:
    """``transformers.CompressedTensorsConfig.__init__``: keep ``format_version``.

    Unpatched, the key falls into ``QuantizationConfig(extra="ignore")`` and is
    dropped, so the loader never learns the layout and a re-save loses it.
    """

    @functools.wraps(init)
    def wrapper(self: Any, *args: Any, format_version: int | None = None, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if format_version is not None:
            setattr(self, FORMAT_VERSION_KEY, int(format_version))

    return wrapper


def wrap_config_to_dict(to_dict: Callable[[Any], dict[str, Any]]) -> Callable[[Any], dict[str, Any]]:
    """``transformers.CompressedTensorsConfig.to_dict``: write ``format_version`` back on save.

    Only while the weights stay compressed: a dequantized model's scales are
    written from memory as (1,), so the marker would be false.
    """

    @functools.wraps(to_dict)
    def wrapper(self: Any) -> dict[str, Any]:
        document = to_dict(self)
        version = getattr(self, FORMAT_VERSION_KEY, None)
        if version is not None and self.is_quantization_compressed:
            document[FORMAT_VERSION_KEY] = version
        return document

    return wrapper
