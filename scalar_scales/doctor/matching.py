"""Which config group quantizes a module, and whether the config leaves it out, decided as the producer decides.

- **compressed-tensors** (``utils/match.py``: ``is_match``, ``match_name``,
  ``_match_class``): a target or ``ignore`` entry matches a module when it
  is ``re:`` and ``re.match`` finds it in the module's name, or when it is
  the module's name, or the name of a class in the module's class hierarchy
  (``LinearBase`` counting as ``Linear``). A checkpoint has no classes, so
  the class is judged from the module's tensors (:func:`module_kind`): a
  module with a packed weight, a 2-D weight or another producer's quantized
  weight is an ``nn.Linear``; an embedding (named ``embed_tokens``, ``wte``,
  ``wpe``, ``word_embeddings``) an ``nn.Embedding``; both are ``nn.Module``.
  A MoE router (named ``gate`` or ``router``) is a class of its own in
  transformers (``Qwen3MoeTopKRouter``), only an ``nn.Module``, though its
  weight is 2-D: ``Linear`` does not target it.
- **ModelOpt** (vLLM's ``ModelOptQuantConfigBase.is_layer_excluded`` and
  ``get_quant_method``, ``ModelOptMixedPrecisionConfig._resolve_quant_algo``):
  one algorithm quantizes every linear module but those ``exclude_modules``
  names exactly, contains, or matches as an ``fnmatch`` wildcard (as on
  Linux, case-sensitively), and those of a vision tower; ``MIXED_PRECISION``
  quantizes each module its ``quantized_layers`` names with that module's
  own algorithm, and an expert with the algorithm of the first entry under
  its MoE block, as vLLM's one fused expert module takes it.

Patterns are matched by :mod:`.patterns`, in time linear in the name;
``tests/producer/test_matching.py`` holds the verdicts to compressed-tensors'
own ``is_match`` on the modules of every toy architecture, and on generated
targets.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from scalar_scales.doctor.patterns import PatternSet
from scalar_scales.nvfp4 import MODELOPT
from scalar_scales.sources.declaration import Declaration, Group

__all__ = [
    "EMBEDDING_NAMES",
    "ROUTER_NAMES",
    "Kind",
    "Matcher",
    "Verdict",
    "fnmatch_pattern",
    "module_kind",
]

Kind = Literal["nvfp4", "quantized", "linear", "embedding", "other"]
"""What a module's tensors say it is: NVFP4, quantized another way (FP8, say), an unquantized linear layer, an
embedding, or anything else (a norm, a router with a bias of its own)."""

EMBEDDING_NAMES = ("embed_tokens", "wte", "wpe", "word_embeddings", "embeddings")
ROUTER_NAMES = ("gate", "router")
_CLASS_TARGETS: dict[Kind, frozenset[str]] = {
    "nvfp4": frozenset({"Linear", "Module"}),
    "quantized": frozenset({"Linear", "Module"}),
    "linear": frozenset({"Linear", "Module"}),
    "embedding": frozenset({"Embedding", "Module"}),
    "other": frozenset({"Module"}),
}
"""The class names a module of each kind answers to in compressed-tensors' ``_match_class``."""
_JUDGED_CLASSES = frozenset().union(*_CLASS_TARGETS.values()) | {"LinearBase"}
"""Class names a checkpoint's tensors can settle: ``LinearBase`` is vLLM's, which no transformers module has."""
Verdict = tuple[tuple[Group, ...], bool]
"""A module's groups, and whether the declaration leaves it out (:meth:`Matcher.classify`)."""
_CLASS_NAME = re.compile(r"[A-Z][A-Za-z0-9_]*")


def module_kind(module: str, weight: tuple[str, tuple[int, ...]] | None, packed: bool, extra: bool) -> Kind:
    """The kind of a module: ``packed`` (it has this layout's packed FP4 weight), its ``weight``'s (dtype,
    shape), and ``extra``: it has tensors a linear layer has not (a router's ``e_score_correction_bias``)."""
    if packed:
        return "nvfp4"
    if weight is None or extra:
        return "other"
    dtype, shape = weight
    if len(shape) != 2 or module.rpartition(".")[2] in ROUTER_NAMES:
        return "other"
    if module.rpartition(".")[2] in EMBEDDING_NAMES:
        return "embedding"
    return "linear" if dtype in ("BF16", "F16", "F32", "F64") else "quantized"


def fnmatch_pattern(wildcard: str) -> str:
    """``fnmatch``'s wildcard as a regular expression for :mod:`.patterns`: ``fnmatch.translate``'s own, with its
    atomic groups made plain (they only spare a backtracking engine work; an automaton needs none)."""
    return fnmatch.translate(wildcard).replace("(?>", "(?:")


@dataclass(frozen=True)
class Matcher:
    """A declaration's groups and exclusions, for one module at a time (:meth:`classify`)."""

    declared: Declaration

    @cached_property
    def _patterns(self) -> tuple[PatternSet, list[int | None]]:
        """Every pattern of the declaration in one set, and for each its group's index (None: an exclusion)."""
        patterns: list[str] = []
        owners: list[int | None] = []
        if self.declared.producer == MODELOPT:
            for entry in self.declared.ignore:
                if any(c in entry for c in "*?["):
                    patterns.append(fnmatch_pattern(entry))
                    owners.append(None)
        else:
            for index, group in enumerate(self.declared.groups):
                for target in group.targets:
                    if target.startswith("re:"):
                        patterns.append(target[3:])
                        owners.append(index)
            for entry in self.declared.ignore:
                if entry.startswith("re:"):
                    patterns.append(entry[3:])
                    owners.append(None)
        return PatternSet(patterns), owners

    @cached_property
    def unjudged_classes(self) -> tuple[str, ...]:
        """compressed-tensors target and ignore entries that name a model's own class (``Qwen3MoeTopKRouter``):
        a checkpoint does not show its modules' classes, so no module can be judged against them."""
        if self.declared.producer == MODELOPT:
            return ()
        entries = [*(t for group in self.declared.groups for t in group.targets), *self.declared.ignore]
        return tuple(dict.fromkeys(e for e in entries if _CLASS_NAME.fullmatch(e) and e not in _JUDGED_CLASSES))

    def compile(self) -> None:
        """Build the patterns now; a pattern that cannot be matched in bounded time raises
        :class:`~scalar_scales.doctor.patterns.PatternError` here."""
        self._patterns  # noqa: B018

    def classify_each(self, modules: list[str], kind: Kind) -> list[Verdict]:
        """:meth:`classify` of each of ``modules``, all of ``kind``: where no pattern can match, a name that no
        entry names takes its kind's verdict without a walk (a large MoE has tens of thousands of modules)."""
        patterns, _ = self._patterns
        if self.declared.producer == MODELOPT or patterns.patterns:
            return [self.classify(module, kind) for module in modules]
        verdict, names = self._by_kind[kind], self._names
        if names.isdisjoint(modules):  # as in nearly every config: no entry names a module
            return [verdict] * len(modules)
        return [verdict if module not in names else self.classify(module, kind) for module in modules]

    def classify(self, module: str, kind: Kind) -> Verdict:
        """The groups that quantize ``module`` (a module of ``kind``) before exclusions, and whether the
        declaration's ``ignore`` (``exclude_modules``) leaves it out: one walk of its name."""
        patterns, owners = self._patterns
        found = patterns.matching(module) if patterns.patterns else frozenset()
        by_pattern = {owners[i] for i in found}
        if self.declared.producer == MODELOPT:
            if kind not in ("nvfp4", "quantized", "linear"):
                return (), False
            excluded = (
                None in by_pattern
                or any(e in module for e in self.declared.ignore if not any(c in e for c in "*?["))
                or any(tower in module for tower in _VISION_TOWERS)
            )
            return self._modelopt_groups(module), excluded
        classes = _CLASS_TARGETS[kind]
        groups = tuple(
            group
            for index, group in enumerate(self.declared.groups)
            if index in by_pattern
            or any(not t.startswith("re:") and (t == module or t in classes) for t in group.targets)
        )
        ignored = None in by_pattern or any(
            not e.startswith("re:") and (e == module or e in classes) for e in self.declared.ignore
        )
        return groups, ignored

    @cached_property
    def _names(self) -> frozenset[str]:
        """Every compressed-tensors target and ignore entry that may name a module exactly."""
        targets = (t for group in self.declared.groups for t in group.targets)
        return frozenset(e for e in (*targets, *self.declared.ignore) if not e.startswith("re:"))

    @cached_property
    def _by_kind(self) -> dict[Kind, Verdict]:
        """:meth:`classify` of a compressed-tensors module that no pattern or name in the declaration can match:
        its kind decides, so each kind is classified once."""
        verdicts: dict[Kind, Verdict] = {}
        for kind, classes in _CLASS_TARGETS.items():
            groups = tuple(group for group in self.declared.groups if any(t in classes for t in group.targets))
            verdicts[kind] = groups, any(e in classes for e in self.declared.ignore)
        return verdicts

    def _modelopt_groups(self, module: str) -> tuple[Group, ...]:
        groups = self.declared.groups
        if not self.declared.quantized_layers:
            return tuple(group for group in groups if group.everything)
        layers = self._layers
        for candidate in _candidates(module):
            if candidate in layers:
                return (groups[layers[candidate]],)
        expert = _EXPERT_MODULE.match(module)
        if expert is not None:
            block, parent = expert["block"], expert["block"].rpartition(".")[0]
            for name, index in self.declared.quantized_layers:
                if name == block or name.startswith((f"{block}.", f"{parent}.")):
                    return (groups[index],)
        return ()

    @cached_property
    def _layers(self) -> dict[str, int]:
        return dict(self.declared.quantized_layers)


_VISION_TOWERS = ("vision_tower", "vision_model", "vit_large_projector")
"""Modules vLLM's ModelOpt configs leave unquantized by name, whatever the config says."""
_EXPERT_MODULE = re.compile(r"(?P<block>.+\.experts)\.\d+\.[^.]+")


def _candidates(module: str) -> tuple[str, ...]:
    """The names under which ``quantized_layers`` may list a module (vLLM's
    ``_quantized_layer_prefix_candidates``)."""
    candidates = [module]
    if module.endswith(".lm_head"):
        candidates.append("lm_head")
    for one, other in (
        ("language_model.model.", "model.language_model."),
        ("model.language_model.", "language_model.model."),
    ):
        if module.startswith(one):
            candidates.append(other + module[len(one) :])
    return tuple(dict.fromkeys(candidates))
