"""What the consumers that the round trip does not run do with a checkpoint's global scales: TensorRT-LLM and
MAX need an NVIDIA GPU and their own builds, so their loaders were read; llama.cpp's converter runs on a CPU,
so it was run on tiny checkpoints. Each entry says which it was, and where the answer comes from.

docs/compatibility.md's section "Consumers the round trip does not run" is generated from
:data:`READ_CONSUMERS` (scripts/compatibility_matrix.py), and ``scalar-scales rule CODE`` prints each
consumer's consequence of the rule's defect (:func:`consequences`); the base tests hold both to this data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "READ_CONSUMERS",
    "SECTION_END",
    "SECTION_START",
    "ReadConsumer",
    "Source",
    "consequence_lines",
    "consequences",
    "section",
]

How = Literal["read, not run", "observed"]


@dataclass(frozen=True)
class Source:
    """Where a statement comes from: a file of a repository at a commit, and the function read in it."""

    repository: str
    commit: str
    path: str
    function: str

    def __str__(self) -> str:
        return f"{self.repository}@{self.commit[:12]} `{self.path}` `{self.function}`"


@dataclass(frozen=True)
class ReadConsumer:
    """One consumer: what it does with (1,) global scales (``legacy``), with 0-D ones (``scalar``) and with
    fused partners whose global scales differ, which checkpoint layouts it accepts, and, by rule name, what it
    does with that rule's defect where its code shows it (by name, as the package names no rule by its code
    outside the rule's definition).

    ``how`` is "read, not run" where the statements come from reading ``sources``, "observed" where the
    consumer ran (``version`` says which) and ``sources`` say where its behaviour lives."""

    consumer: str
    version: str
    how: How
    layouts: str
    legacy: str
    scalar: str
    fused_differ: str
    sources: tuple[Source, ...]
    threads: tuple[str, ...] = ()
    by_rule: tuple[tuple[str, str], ...] = ()


_TRTLLM_LINEAR = Source(
    "NVIDIA/TensorRT-LLM",
    "00bbf71e796406ea8593a77cbfb828356182db16",
    "tensorrt_llm/_torch/modules/linear.py",
    "NVFP4LinearMethod.create_weights, NVFP4LinearMethod.load_weight_scales",
)
_TRTLLM_MOE = Source(
    "NVIDIA/TensorRT-LLM",
    "002366a4074cacd4f7be481727bea2e1eb9136a5",
    "tensorrt_llm/_torch/modules/fused_moe/quantization.py",
    "NVFP4FusedMoEMethod.load_all_fp4_weight_scales_and_alphas, load_expert_fc31_alpha_nvfp4",
)
_TRTLLM_MLA = Source(
    "NVIDIA/TensorRT-LLM",
    "02586bf0b0f59d29967bf4aa27d5714a0b4788f6",
    "tensorrt_llm/_torch/models/modeling_deepseekv4.py",
    "the model's load_weights, its kv_a_proj_with_mqa branch (nvfp4_fused_a)",
)
_MAX_LINEAR = Source(
    "modular/modular",
    "271b11bde1b8ae68f6f83d74261aa75ab1d218be",
    "max/python/max/nn/linear.py",
    "Linear.__init__",
)
_MAX_STACKED = Source(
    "modular/modular",
    "8607f351558f0220a84ac10a2dcfbb68c7c558b5",
    "max/python/max/nn/stacked_linear.py",
    "StackedLinear.stacked_weight_scale_2",
)
_MAX_LOADER = Source(
    "modular/modular",
    "04f37c571ebd44da1819a168735eacad5fc13d6b",
    "max/python/max/nn/layer/layer.py",
    "Module.load_state_dict, _array_from_weight_loader",
)
_LLAMA_CPP = "ggml-org/llama.cpp"
_LLAMA_CPP_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
_LLAMA_PREPARE = Source(_LLAMA_CPP, _LLAMA_CPP_COMMIT, "conversion/base.py", "ModelBase.prepare_tensors")
_LLAMA_GENERATE = Source(
    _LLAMA_CPP,
    _LLAMA_CPP_COMMIT,
    "conversion/base.py",
    "ModelBase._generate_nvfp4_tensors, _write_scale_tensor, _flush_nvfp4_experts",
)

READ_CONSUMERS: tuple[ReadConsumer, ...] = (
    ReadConsumer(
        consumer="TensorRT-LLM (PyTorch backend)",
        version="main as stored at the commits cited (1.2's tag was not in the store)",
        how="read, not run",
        layouts=(
            "ModelOpt (`hf_quant_config.json`, `weight_scale_2`/`input_scale` multipliers); compressed-tensors "
            "NVFP4 names are not mapped in the files read (a shared mapping is open as PR #17726)"
        ),
        legacy=(
            "loads: each dense layer's `weight_scale_2`, `input_scale` and `alpha` are parameters of shape (1,), "
            "which a (1,) tensor is copied into; MoE experts read `[...].reshape([])`"
        ),
        scalar="loads: a 0-D tensor broadcasts into the (1,) parameters; MoE experts read `[...].reshape([])`",
        fused_differ=(
            "dense q/k/v and gate/up (one fused layer): refuses to load, `AssertionError: The weight_scale_2 should "
            "be same for all the weights` (the same for `input_scale`); MoE gate/up (w1/w3): at the MoE commit "
            "read, warns `w1_weight_scale_2 != w3_weight_scale_2 (...), selecting the larger value. Accuracy may "
            "be affected.` and loads both halves with the larger value (earlier releases assert, #6569); MLA "
            "a-projections (DeepSeek-V4's loader): the larger `weight_scale_2` is shared and the other partner's "
            "weight requantized onto it, while differing `input_scale`s fail an assertion"
        ),
        sources=(_TRTLLM_LINEAR, _TRTLLM_MOE, _TRTLLM_MLA),
        threads=("NVIDIA/TensorRT-LLM#6569", "NVIDIA/TensorRT-LLM#17726"),
        by_rule=(
            ("legacy-scale-shape", "loads: its NVFP4 scale parameters have shape (1,) and take (1,) and 0-D alike"),
            (
                "missing-weight-global-scale",
                "a dense layer with an `input_scale` but no `weight_scale_2` fails to load: `alpha = "
                "input_scale.float() * weight_scale_2.float()` on None (`AttributeError`)",
            ),
            (
                "missing-input-global-scale",
                "a dense layer without `input_scale` loads in dynamic mode: its activation scale is computed from "
                "each input at run time",
            ),
            (
                "fused-scales-differ",
                "dense fused q/k/v or gate/up: refuses to load (`AssertionError: The weight_scale_2 should be same "
                "for all the weights`); MoE gate/up: loads with the larger of the two, a warning in the log; MLA "
                "a-projections: requantizes the smaller partner onto the larger scale",
            ),
        ),
    ),
    ReadConsumer(
        consumer="MAX (modular)",
        version="main as stored at the commits cited (26.7's tag was not in the store)",
        how="read, not run",
        layouts=(
            "ModelOpt only: compressed-tensors NVFP4 is not parsed (modular #6600, #6697; loading it is open as "
            "PRs #6699 and #6773)"
        ),
        legacy=(
            "loads: `Linear` declares `weight_scale_2` with shape (), and the weight loader takes a (1,) value "
            'for a () weight ("These shapes are actually the same.")'
        ),
        scalar="loads: the shape `Linear` declares for `weight_scale_2`",
        fused_differ=(
            "q/k/v and gate/up stacked by `StackedLinear`: loads and silently uses the largest partner's "
            "`weight_scale_2` for the whole stacked matmul, so the other partners' outputs are scaled by the "
            "ratio"
        ),
        sources=(_MAX_LINEAR, _MAX_STACKED, _MAX_LOADER),
        threads=("modular/modular#6600", "modular/modular#6697", "modular/modular#6699", "modular/modular#6773"),
        by_rule=(
            ("legacy-scale-shape", "loads: its weight loader takes a (1,) value for the () `weight_scale_2`"),
            (
                "missing-weight-global-scale",
                "refuses to load: `load_state_dict` (strict by default) raises `ValueError: load_state_dict() "
                "strict=True validation failed. Missing required weights: ...`",
            ),
            (
                "fused-scales-differ",
                "loads silently: the stacked matmul uses the largest partner's `weight_scale_2` for every partner",
            ),
        ),
    ),
    ReadConsumer(
        consumer="llama.cpp `convert_hf_to_gguf.py`",
        version=(
            f"llama.cpp {_LLAMA_CPP_COMMIT[:9]}, as vendored in llama-cpp-python 0.3.36, run by "
            "scripts/observe_llama_cpp.py"
        ),
        how="observed",
        layouts=(
            "ModelOpt and compressed-tensors (`nvfp4-pack-quantized`): the compressed-tensors names are renamed to "
            "ModelOpt's and their global scales inverted"
        ),
        legacy=(
            "converts: each scale is flattened into a one-element F32 `.scale` tensor (experts: one value per "
            "expert), the same GGUF as from 0-D scales"
        ),
        scalar="converts: the same GGUF as from (1,) scales",
        fused_differ=(
            "converts, each partner keeping its own value: NVFP4 q/k/v are written as separate tensors, each with "
            "its `.scale`, and experts' gate and up as separate tensors with their per-expert scales"
        ),
        sources=(_LLAMA_PREPARE, _LLAMA_GENERATE),
        threads=("ggml-org/llama.cpp#21095",),
        by_rule=(
            ("legacy-scale-shape", "converts: the same GGUF as from 0-D scales"),
            (
                "missing-weight-global-scale",
                "converts silently, as though the global scale were 1.0: the layer gets no `.scale` tensor",
            ),
            (
                "missing-input-global-scale",
                "converts silently, as though the input scale were 1.0: the layer gets no `.input_scale` tensor",
            ),
            (
                "invalid-scale-value",
                "converts: a compressed-tensors global scale of 0 becomes a `.scale` of inf, a ModelOpt one of 0",
            ),
            (
                "other-convention",
                "converts each scale as its name says (compressed-tensors' inverted, ModelOpt's kept), so one "
                "stored in the other convention becomes the reciprocal of the right `.scale`",
            ),
            ("fused-scales-differ", "converts, each partner keeping its own global scale (no fused tensor takes one)"),
        ),
    ),
)
"""Each consumer the round trip does not run, in the order docs/compatibility.md lists them."""


def consequences(rule_name: str) -> list[tuple[ReadConsumer, str]]:
    """Each consumer whose code shows what it does with the defect of the rule named ``rule_name``, and what it
    does."""
    return [(consumer, text) for consumer in READ_CONSUMERS for rule, text in consumer.by_rule if rule == rule_name]


def consequence_lines(rule_name: str) -> list[str]:
    """What ``scalar-scales rule CODE`` adds to the reference of the rule named ``rule_name``: each consumer not
    run, and what it does with the defect; nothing where no consumer's code shows it."""
    found = consequences(rule_name)
    if not found:
        return []
    lines = ["In the consumers the round trip does not run (docs/compatibility.md):", ""]
    return lines + [f"- {consumer.consumer} ({consumer.how}): {text}." for consumer, text in found]


SECTION_START = "<!-- Consumers not run: generated from scalar_scales/consumers/read.py. Do not edit. -->"
SECTION_END = "<!-- End of the consumers not run. -->"


def section() -> list[str]:
    """docs/compatibility.md's section on the consumers the round trip does not run, between its markers:
    one row per consumer, then the sources each row comes from."""
    lines = [
        SECTION_START,
        "## Consumers the round trip does not run",
        "",
        "TensorRT-LLM's and MAX's NVFP4 loaders need an NVIDIA GPU and builds of their own, so the round trip does",
        'not run them: their rows say what their code does, "read, not run", at the commit cited. llama.cpp\'s',
        'converter runs on a CPU: its row is "observed", from running the version named on tiny NVFP4',
        "checkpoints (q/k/v and MoE experts; compressed-tensors and ModelOpt; (1,) and 0-D; partners equal and",
        "differing; one rule's defect at a time) with scripts/observe_llama_cpp.py and reading the GGUF tensors it",
        "would write. `scalar-scales rule CODE` prints what each does with that rule's defect, where its code shows",
        "it.",
        "",
        "| consumer | how | checkpoints it accepts | (1,) global scales | 0-D global scales "
        "| fused partners that differ |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {c.consumer} | {c.how}: {c.version} | {c.layouts} | {c.legacy} | {c.scalar} | {c.fused_differ} |"
        for c in READ_CONSUMERS
    ]
    lines += ["", "Sources:", ""]
    for c in READ_CONSUMERS:
        threads = f"; threads: {', '.join(c.threads)}" if c.threads else ""
        lines.append(f"- {c.consumer}: {'; '.join(map(str, c.sources))}{threads}.")
    widest_first = sorted(READ_CONSUMERS, key=lambda consumer: -len(consumer.by_rule))
    names = list(dict.fromkeys(name for consumer in widest_first for name, _ in consumer.by_rule))
    lines += [
        "",
        "What each does with the defect of a rule of `scalar-scales check`, where its code shows it:",
        "",
        f"| rule | {' | '.join(c.consumer for c in READ_CONSUMERS)} |",
        f"|---|{'---|' * len(READ_CONSUMERS)}",
    ]
    for name in names:
        cells = [dict(c.by_rule).get(name, "not read") for c in READ_CONSUMERS]
        lines.append(f"| `{name}` | {' | '.join(cells)} |")
    return [*lines, SECTION_END]
