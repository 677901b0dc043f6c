"""A rule's examples, as data: the broken checkpoints that show it, each a clean checkpoint changed by a few edits.

A rule names its examples where it is defined (:class:`~scalar_scales.doctor.rules.Rule`'s ``examples``), and
everything else is made from them: docs/rules.md gives each one's name and what it is, and the test kit's broken
corpus (``scalar_scales_testkit.broken``) makes each in every layout the rule is about, starting from the
synthetic compressed-tensors checkpoint and from a real ModelOpt export; its test holds the rule to finding it
there, naming the tensor, and no other rule to finding anything (``alongside`` aside). ``scripts/check_evidence.py``
breaks real artifacts the same way, and serves them, for each rule's effect.

An edit names a tensor by a template: ``{module}`` is the module a break of one module changes (an expert of the
last layer; a break of each expert runs the edits once for each), and ``{weight}``, ``{weight_scale}``,
``{weight_global}`` and ``{input_global}`` are the names the checkpoint's layout gives those tensors
(:class:`~scalar_scales.nvfp4.ProducerLayout`). A new kind of break is a new edit here and its one ``case`` in
the test kit; a rule that breaks a checkpoint as another does needs neither.

The edits and the examples are named tuples, not frozen dataclasses: every command defines them as it starts, and a
frozen dataclass takes about eight times as long to define (together, 6 ms of each ``check``).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "AddScales",
    "Declare",
    "DeclareElsewhere",
    "DeclareGroupSize",
    "DeclareKVCache",
    "DeclareWeights",
    "DropDeclaration",
    "Edit",
    "Example",
    "HalveGroups",
    "IgnoreLayer",
    "IndexAdds",
    "IndexDrops",
    "InvertScales",
    "LegacyShapes",
    "MultiplyValue",
    "Remove",
    "RemoveEvery",
    "ScaleAmax",
    "SetDtype",
    "SetValue",
    "TargetOnlyLayer",
    "Undeclare",
    "Unexclude",
    "Unquantize",
    "WeightOnly",
]


class Remove(NamedTuple):
    """Remove ``tensor`` from its shard, and from the index where there is one."""

    tensor: str


class RemoveEvery(NamedTuple):
    """Remove every tensor whose name's last part is ``leaf`` (a template: ``{input_global}``), from its shard and
    from the index, as a producer that never wrote them leaves a checkpoint."""

    leaf: str


class SetValue(NamedTuple):
    """Set the one-value F32 scale ``tensor`` to ``value``."""

    tensor: str
    value: float


class MultiplyValue(NamedTuple):
    """Multiply the one-value F32 scale ``tensor`` by ``factor``."""

    tensor: str
    factor: float


class ScaleAmax(NamedTuple):
    """Make the one-value F32 global scale ``tensor`` imply an amax ``factor`` times its own, in its layout's
    convention: compressed-tensors' divisor is divided by ``factor``, ModelOpt's multiplier multiplied by it."""

    tensor: str
    factor: float


class InvertScales(NamedTuple):
    """Store every global scale as its reciprocal: the other producer's convention."""


class SetDtype(NamedTuple):
    """Label ``tensor`` with ``dtype`` in its shard's header, its bytes unchanged."""

    tensor: str
    dtype: str


class HalveGroups(NamedTuple):
    """Cut the group scales ``tensor`` (rows, groups) to (rows, groups / 2), as for groups twice the size."""

    tensor: str


class AddScales(NamedTuple):
    """Add the 0-D F32 tensors ``tensors``, each of ``value``, to the shard that holds ``beside``."""

    tensors: tuple[str, ...]
    value: float
    beside: str


class IndexAdds(NamedTuple):
    """The index lists ``tensor``, which no shard holds, in the shard of ``beside`` (a single-file checkpoint gets
    the index that lists its file first)."""

    tensor: str
    beside: str


class IndexDrops(NamedTuple):
    """The index no longer lists ``tensor``, which its shard still holds."""

    tensor: str


class LegacyShapes(NamedTuple):
    """Every global scale of shape (1,), as llm-compressor writes them: compressed-tensors' by ``migrate --to
    legacy``, which drops the marker too."""


class Declare(NamedTuple):
    """Set ``key`` of the quantization declaration a server reads (config.json's ``quantization_config`` where
    there is one, else hf_quant_config.json's ``quantization``) to the JSON value ``value``."""

    key: str
    value: object


class DeclareElsewhere(NamedTuple):
    """Set ``key`` of hf_quant_config.json's ``quantization``, where config.json's ``quantization_config`` is the
    declaration a server reads, to the JSON value ``value``: the two files a ModelOpt export declares in disagree.
    Every other declaration edit changes both files alike."""

    key: str
    value: object


class Undeclare(NamedTuple):
    """Remove ``key`` from the quantization declaration a server reads."""

    key: str


class DropDeclaration(NamedTuple):
    """Remove the quantization declaration: config.json's ``quantization_config``, and hf_quant_config.json."""


class IgnoreLayer(NamedTuple):
    """The declaration leaves layer ``layer`` unquantized: compressed-tensors' ``ignore`` takes a ``re:`` pattern
    for it, ModelOpt's ``exclude_modules`` a wildcard."""

    layer: int


class TargetOnlyLayer(NamedTuple):
    """The declaration quantizes layer ``layer`` alone: compressed-tensors' config groups target it alone,
    ModelOpt's ``MIXED_PRECISION`` lists its modules alone."""

    layer: int


class WeightOnly(NamedTuple):
    """Every config group weight-only: ``input_activations`` null, as compressed-tensors' NVFP4A16 declares (and
    ModelOpt's config.json, whose config groups say what its ``quant_algo`` does)."""


class DeclareKVCache(NamedTuple):
    """Declare an FP8 KV cache: compressed-tensors' ``kv_cache_scheme``, ModelOpt's ``kv_cache_quant_algo``."""


class DeclareGroupSize(NamedTuple):
    """Declare NVFP4 groups of ``size`` values: each compressed-tensors config group's ``weights`` and
    ``input_activations`` ``group_size``, ModelOpt's ``group_size``; the tensors stay grouped by 16."""

    size: int


class DeclareWeights(NamedTuple):
    """Set each config group's ``weights`` argument ``key`` to the JSON value ``value`` (compressed-tensors), the
    tensors unchanged."""

    key: str
    value: object


class Unexclude(NamedTuple):
    """The declaration's exclusions (``ignore``, ``exclude_modules``) no longer name the modules whose name ends
    with ``suffix``, in either file a ModelOpt export declares them in; the modules stay as they are stored."""

    suffix: str


class Unquantize(NamedTuple):
    """Store the first of ``modules`` the checkpoint holds as NVFP4 as an unquantized BF16 ``weight`` instead,
    its NVFP4 tensors gone, as a quantizer that skipped it writes it; the finding names that ``weight``."""

    modules: tuple[str, ...]


Edit = (
    Remove
    | RemoveEvery
    | SetValue
    | MultiplyValue
    | ScaleAmax
    | InvertScales
    | SetDtype
    | HalveGroups
    | AddScales
    | IndexAdds
    | IndexDrops
    | LegacyShapes
    | Declare
    | DeclareElsewhere
    | Undeclare
    | DropDeclaration
    | IgnoreLayer
    | TargetOnlyLayer
    | WeightOnly
    | DeclareKVCache
    | DeclareGroupSize
    | DeclareWeights
    | Unexclude
    | Unquantize
)
"""Each way an example changes a clean checkpoint, in the test kit's terms."""


class Example(NamedTuple):
    """One broken checkpoint that shows a rule: ``name`` (the corpus's name for it), ``summary`` (what the break
    is, as it happens: docs/rules.md gives it), and the ``edits`` that make it, in order.

    ``names``: the tensor the rule's finding names, as a template; without it, the one the last edit names: the
    tensor a :class:`Remove`, :class:`SetValue`, :class:`MultiplyValue`, :class:`ScaleAmax`, :class:`SetDtype`,
    :class:`HalveGroups`, :class:`IndexAdds` or :class:`IndexDrops` changes, or the weight an :class:`Unquantize`
    stores; any other edit names the config (the finding names no tensor). ``alongside``: the codes of the rules
    the same break necessarily brings too (NV102's (1,) scales are each NV101). ``per_module``: the break changes
    the one module ``{module}`` (the evidence makes it on one expert and on every expert); else the checkpoint as
    a whole.
    """

    name: str
    summary: str
    edits: tuple[Edit, ...]
    names: str | None = None
    alongside: tuple[str, ...] = ()
    per_module: bool = False
