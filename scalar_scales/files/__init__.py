"""The safetensors I/O, without torch: read and validate a header exactly as strictly as the reference reader,
plan its one-byte-per-scale edit, decode a scale's value, replace a file durably, and edit ``config.json``'s
marker changing no other byte."""

from typing import TYPE_CHECKING

from scalar_scales.files.config_marker import (
    MarkerEdit,
    plan_format_version,
    set_format_version,
    with_format_version,
    write_planned,
)
from scalar_scales.files.durable import TEMPORARY_NAME, create_exclusive, os_errors_named, remove_stale, replaced
from scalar_scales.files.header import (
    DTYPE_BITS,
    MAX_HEADER_BYTES,
    FileIdentity,
    Layout,
    SafetensorsHeader,
    TensorEntry,
    ending_with,
    file_identity,
    header_length_of,
    parse_header,
    read_header,
)
from scalar_scales.files.json_document import MAX_JSON_BYTES, json_object, read_json_object
from scalar_scales.files.scalars import decode_scalar, read_scalars

if TYPE_CHECKING:
    from scalar_scales.files.header_edit import HeaderEdit, plan_header_edit

__all__ = [
    "DTYPE_BITS",
    "MAX_HEADER_BYTES",
    "MAX_JSON_BYTES",
    "TEMPORARY_NAME",
    "FileIdentity",
    "HeaderEdit",
    "Layout",
    "MarkerEdit",
    "SafetensorsHeader",
    "TensorEntry",
    "create_exclusive",
    "decode_scalar",
    "ending_with",
    "file_identity",
    "header_length_of",
    "json_object",
    "os_errors_named",
    "parse_header",
    "plan_format_version",
    "plan_header_edit",
    "read_header",
    "read_json_object",
    "read_scalars",
    "remove_stale",
    "replaced",
    "set_format_version",
    "with_format_version",
    "write_planned",
]


_EDIT_NAMES = frozenset({"HeaderEdit", "plan_header_edit"})


def __getattr__(name: str) -> object:
    """The header editor's names, imported when first asked for: only ``migrate`` edits, and a check need not
    import it."""
    if name in _EDIT_NAMES:
        from scalar_scales.files import header_edit

        return getattr(header_edit, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
