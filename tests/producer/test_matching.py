"""The doctor's target matching against compressed-tensors' own ``is_match``, on the modules of every toy
architecture the tests build (as llm-compressor quantizes them: each expert's projections its own ``Linear``) and
on generated targets and ignore lists."""

from __future__ import annotations

import re

import pytest
import torch
from compressed_tensors.utils.match import is_match
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM

from compressed_tensors_patch.toy_moe import toy_config
from scalar_scales.doctor import Kind, Matcher, module_kind
from scalar_scales.nvfp4 import COMPRESSED_TENSORS, NVFP4_FORMAT
from scalar_scales.sources import Declaration, Group
from scalar_scales_testkit.toys import TOYS

ARCHITECTURES = {"qwen3-moe": toy_config, **TOYS}
CLASS_TARGETS = ("Linear", "Embedding", "Module", "LinearBase")
"""The class names a checkpoint can settle; a model's own classes are not judged (test_check: the class rules are
not applied then)."""


def quantizable_modules(architecture: str) -> list[tuple[str, torch.nn.Module]]:
    """Every module with a weight of its own, as a checkpoint shows it; fused experts as llm-compressor unfuses
    them for calibration, one ``Linear`` per projection."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(ARCHITECTURES[architecture]())
    found: list[tuple[str, torch.nn.Module]] = []
    for name, module in model.named_modules():
        fused = module._parameters.get("gate_up_proj")
        if fused is not None and fused.dim() == 3:
            found += [
                (f"{name}.{expert}.{projection}", torch.nn.Linear(1, 1, device="meta"))
                for expert in range(fused.shape[0])
                for projection in ("gate_proj", "up_proj", "down_proj")
            ]
        elif module._parameters.get("weight") is not None:
            found.append((name, module))
    return found


MODULES = {architecture: quantizable_modules(architecture) for architecture in ARCHITECTURES}
NAMES = sorted({name for modules in MODULES.values() for name, _ in modules})


def kind_of(name: str, module: torch.nn.Module) -> Kind:
    extra = "e_score_correction_bias" in module._parameters or "e_score_correction_bias" in module._buffers
    return module_kind(name, ("BF16", tuple(module.weight.shape)), packed=False, extra=extra)


def our_verdicts(modules: list[tuple[str, torch.nn.Module]], targets: list[str], ignore: list[str]) -> list[bool]:
    """Each module's verdict as the doctor reaches it: the modules of one kind classified together."""
    declared = Declaration(
        COMPRESSED_TENSORS,
        NVFP4_FORMAT,
        (Group("group_0", NVFP4_FORMAT, nvfp4=True, input_activations=True, targets=tuple(targets)),),
        tuple(ignore),
    )
    matcher, kinds = Matcher(declared), [kind_of(name, module) for name, module in modules]
    verdicts: dict[str, bool] = {}
    for kind in set(kinds):
        names = [name for (name, _), other in zip(modules, kinds, strict=True) if other == kind]
        for name, (groups, ignored) in zip(names, matcher.classify_each(names, kind), strict=True):
            verdicts[name] = bool(groups) and not ignored
    return [verdicts[name] for name, _ in modules]


def assert_same_verdicts(targets: list[str], ignore: list[str]) -> None:
    for architecture, modules in MODULES.items():
        ours = our_verdicts(modules, targets, ignore)
        for (name, module), verdict in zip(modules, ours, strict=True):
            assert verdict == is_match(name, module, targets, ignore), (architecture, name, targets, ignore)


@pytest.mark.parametrize(
    ("targets", "ignore"),
    [
        (["Linear"], ["lm_head"]),
        (["Linear"], ["lm_head", "re:.*mlp.gate$"]),
        (["Linear"], ["lm_head", "re:.*self_attn.*", "re:.*shared_expert.*"]),
        ([r"re:.*experts\.\d+\..*"], []),
        (["re:.*mlp.*"], ["re:.*experts.*"]),
        (["Module"], ["Embedding"]),
        (["Embedding"], []),
        (["model.layers.0.self_attn.q_proj", "lm_head"], []),
    ],
)
def test_the_recipes_targets_match_as_compressed_tensors_matches_them(targets, ignore):
    assert_same_verdicts(targets, ignore)


def fragment(name: str, start: int, length: int) -> str:
    return name[start % len(name) :][: max(1, length)]


patterns = st.builds(
    lambda name, start, length, shape: shape.format(re.escape(fragment(name, start, length))),
    st.sampled_from(NAMES),
    st.integers(0, 80),
    st.integers(1, 30),
    st.sampled_from(["re:.*{}", "re:.*{}$", "re:{}", "re:.*{}.*", r"re:.*\.\d+\.{}", "re:(?:{}|x)"]),
)
entries = st.one_of(patterns, st.sampled_from(NAMES), st.sampled_from(CLASS_TARGETS))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(targets=st.lists(entries, min_size=1, max_size=4), ignore=st.lists(entries, max_size=3))
def test_generated_targets_and_ignore_lists_match_as_compressed_tensors_matches_them(targets, ignore):
    assert_same_verdicts(targets, ignore)
