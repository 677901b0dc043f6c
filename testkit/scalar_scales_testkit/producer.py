"""The producer side of the tests: quantize the toy MoE through each save path, and load artifacts for reference."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import compressed_tensors
import torch
import transformers
from llmcompressor import oneshot
from llmcompressor.entrypoints.model_free import model_free_ptq
from transformers import AutoModelForCausalLM

import compressed_tensors_patch
from compressed_tensors_patch import toy_moe

__all__ = [
    "REFUSES_0D_UNPATCHED",
    "RUN_SAVE_PATH",
    "SAVE_PATH_CASES",
    "RunArtifacts",
    "cosine",
    "differing",
    "load_and_run",
    "load_bf16",
    "load_reference",
    "logits_in_float32",
    "loguru_messages",
    "max_relative_difference",
    "migrated_copy",
    "quantize_to",
    "refuses_0d_unpatched",
    "run_artifacts",
]

SAVE_PATH_CASES: list[tuple[str, str]] = [
    ("NVFP4", "save_pretrained"),
    ("NVFP4", "output_dir"),
    ("NVFP4A16", "save_pretrained"),
    ("NVFP4A16", "output_dir"),
    ("NVFP4A16", "model_free"),
]
"""(scheme, save path) pairs: the model-free path cannot calibrate activations, so it has no NVFP4 (W4A4) artifact."""

RUN_SAVE_PATH = "output_dir"
"""The save path scripts/make_artifacts.py writes the round trip's artifacts through (``oneshot(output_dir=...)``).
Measured: ``quantize_to(..., save_path="output_dir")`` writes every file of them byte for byte, in each producer
environment; ``save_pretrained`` writes the same config, weights and recipe, without the tokenizer's files."""

UNPATCHED_REFUSES_0D = {"5.17.0": False, "5.25.0": True}
"""Each transformers release the tests run, and whether its ``from_pretrained`` refuses 0-D global scales without
the producer patch: 5.25.0 builds a (1,) parameter for each and reports the shapes as a MISMATCH. The patch builds
the skeleton in the checkpoint's layout, so with it every release here loads both."""


def refuses_0d_unpatched() -> bool:
    """Whether the installed transformers refuses 0-D global scales without the patch; a release not observed yet
    raises KeyError: observe it (tests/roundtrip/test_transformers_from_pretrained.py), then add it."""
    return UNPATCHED_REFUSES_0D[transformers.__version__]


REFUSES_0D_UNPATCHED = (
    "this transformers refuses 0-D global scales without the patch "
    "(tests/roundtrip/test_transformers_from_pretrained.py shows it)"
)
"""Why a test of what the unpatched stack does with 0-D global scales is skipped where ``refuses_0d_unpatched``."""


PRODUCER_PACKAGES = ("torch", "transformers", "compressed-tensors", "llmcompressor")
"""The versions scripts/make_artifacts.py records in ``ct-<version>/producer.json``."""

_TOY_FIELDS = (
    "model_type",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "tie_word_embeddings",
)


@dataclass(frozen=True)
class RunArtifacts:
    """What scripts/make_artifacts.py wrote in this environment this run: the toy in bf16 (``ARTIFACTS/bf16``) and
    its NVFP4 presets quantized from it (``ARTIFACTS/ct-<compressed-tensors version>/<scheme>-<form>``), each
    through ``RUN_SAVE_PATH``. Other suites read them at the same time: read only."""

    bf16: Path
    producer: Path

    def folder(self, scheme: str, *, patched: bool) -> Path | None:
        """The artifact of ``scheme``, format 2 or legacy, when the run wrote it."""
        path = self.producer / f"{scheme}-{'format2' if patched else 'legacy'}"
        return path if scheme in toy_moe.SCHEMES and (path / "config.json").is_file() else None

    def folders(self) -> list[Path]:
        """``bf16`` and every artifact the run wrote that ``folder`` hands out."""
        found = [self.folder(scheme, patched=patched) for scheme in toy_moe.SCHEMES for patched in (False, True)]
        return [self.bf16, *(path for path in found if path is not None)]


def run_artifacts() -> RunArtifacts | None:
    """The artifacts the test command's run wrote here (``SCALAR_SCALES_ARTIFACTS``), where it holds this
    environment's: ``bf16`` is the toy Qwen3-MoE, and ``ct-<compressed-tensors version>/producer.json`` names the
    versions installed here. None otherwise (a developer's pytest, another toy): the tests quantize themselves."""
    root = os.environ.get("SCALAR_SCALES_ARTIFACTS")
    if not root:
        return None
    bf16, producer = Path(root) / "bf16", Path(root) / f"ct-{compressed_tensors.__version__}"
    if not (bf16 / "model.safetensors").is_file() or not (producer / "producer.json").is_file():
        return None
    on_disk, toy = json.loads((bf16 / "config.json").read_text()), toy_moe.toy_config().to_dict()
    if any(on_disk.get(name) != toy.get(name) for name in _TOY_FIELDS):
        return None
    written_by = json.loads((producer / "producer.json").read_text())
    if any(written_by.get(package) != metadata.version(package) for package in PRODUCER_PACKAGES):
        return None
    return RunArtifacts(bf16, producer)


@contextlib.contextmanager
def loguru_messages() -> Iterator[list[str]]:
    """Each ``"<module>: <message>"`` logged through loguru (llm-compressor's logger, and the patch's) in the block."""
    from loguru import logger

    messages: list[str] = []
    sink = logger.add(lambda line: messages.append(line.rstrip("\n")), format="{name}: {message}", level="INFO")
    try:
        yield messages
    finally:
        logger.remove(sink)


def differing(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    """Names of the parameters whose dtype or values differ between two loads of the same model."""
    assert a.keys() == b.keys()
    return [n for n in a if a[n].dtype != b[n].dtype or not torch.equal(a[n].reshape(-1), b[n].reshape(-1))]


def max_relative_difference(reference: dict[str, torch.Tensor], other: dict[str, torch.Tensor]) -> float:
    """The largest ``|other - reference| / |reference|`` over every nonzero element of every tensor."""
    worst = 0.0
    for name, expected in reference.items():
        expected = expected.float()
        nonzero = expected != 0
        if nonzero.any():
            error = (other[name].float() - expected).abs()[nonzero] / expected.abs()[nonzero]
            worst = max(worst, error.max().item())
    return worst


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0).item()


def load_and_run(
    path: Path, prompt_ids: torch.Tensor, *, patched: bool, device: str | torch.device = "cpu"
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Decompressed parameters (after the first forward) and logits of a checkpoint, loaded for reference.

    compressed-tensors decompresses on the first forward pass, so the
    parameters are read after it. The patch is on or off for the load only.
    """
    compressed_tensors_patch.apply() if patched else compressed_tensors_patch.revert()
    try:
        model = load_reference(path).to(device)
        with torch.no_grad():
            logits = model(prompt_ids).logits.float()
    finally:
        compressed_tensors_patch.revert()
    return {name: p.detach() for name, p in model.named_parameters()}, logits


def logits_in_float32(path: Path, prompt_ids: torch.Tensor) -> torch.Tensor:
    """A checkpoint's logits with its decompressed weights in float32, with the patch: compressed-tensors
    decompresses in the checkpoint's dtype on the first forward pass, after which the model is cast, so the weights
    are the bf16 model's exactly and only the arithmetic's precision differs."""
    compressed_tensors_patch.apply()
    try:
        model = load_reference(path)
        with torch.no_grad():
            model(prompt_ids)
            return model.to(torch.float32)(prompt_ids).logits.float()
    finally:
        compressed_tensors_patch.revert()


def migrated_copy(source: Path, target: Path, *args: str) -> Path:
    """A copy of ``source`` at ``target``, migrated by the installed ``scalar-scales migrate`` command."""
    shutil.copytree(source, target)
    cli = Path(sys.executable).parent / "scalar-scales"
    result = subprocess.run([str(cli), "migrate", str(target), *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"scalar-scales migrate {target} {' '.join(args)}: {result.stderr.strip()}")
    return target


def load_bf16(bf16_dir: Path) -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(bf16_dir, dtype=torch.bfloat16)


def quantize_to(
    bf16_dir: Path, out: Path, scheme: str, *, patched: bool, save_path: str, device: str | torch.device = "cpu"
) -> Path:
    """Quantize the toy model with ``scheme`` on ``device`` and write it through ``save_path``."""
    patch = compressed_tensors_patch.applied() if patched else contextlib.nullcontext()
    with patch:
        if save_path == "model_free":
            model_free_ptq(bf16_dir, out, scheme=scheme, ignore=["lm_head", "re:.*mlp.gate$"], device=device)
            return out
        model = load_bf16(bf16_dir).to(device)
        if save_path == "output_dir":
            oneshot(model=model, output_dir=str(out), **toy_moe.oneshot_kwargs(scheme))
        else:
            oneshot(model=model, **toy_moe.oneshot_kwargs(scheme))
            model.save_pretrained(out, save_compressed=True)
    return out


def _drop_broken_lazy_modules() -> None:
    """Forget lazy alias modules that cannot be listed without torchvision.

    transformers 5.17 patches ``from_pretrained`` by calling ``dir()`` on every
    module in ``sys.modules``; its image-processor aliases (no ``__file__``)
    import torchvision when listed. Where torchvision is absent, or broken
    beside a CPU torch, that raises, so we drop just those aliases.
    """
    for name, module in list(sys.modules.items()):
        if module is None or getattr(module, "__file__", None) is not None:
            continue
        try:
            dir(module)
        except Exception:
            del sys.modules[name]


def load_reference(directory: str | os.PathLike[str]) -> Any:
    """Load a compressed MoE checkpoint for reference inside ``load_quantizable_moe()``.

    Plain ``from_pretrained`` dequantizes fused experts without their
    ``weight_global_scale`` (transformers issue 48371); linearized experts
    are ordinary quantized Linear modules and decompress correctly.

    ``load_quantizable_moe`` leaves its save mapping registered process-wide
    for the model type, after which a plain ``from_pretrained`` of the same
    architecture silently re-initialises its experts. The loaded model keeps
    its own save mapping (``_weight_conversions``), so we put the global one back.

    It also registers the linearized experts' class as a process-wide patch
    mapping, and clears it only after a load that succeeds: after one that
    raises (transformers 5.25 refuses a 0-D global scale unpatched), every
    later ``load_quantizable_moe`` load raises "already has a patch mapping
    registered". So we put back the patch mappings there were before, too.
    """
    from llmcompressor.modeling.moe.linearize import load_quantizable_moe
    from transformers import AutoConfig, AutoModelForCausalLM, conversion_mapping, monkey_patching

    _drop_broken_lazy_modules()
    model_type = AutoConfig.from_pretrained(directory).model_type
    mapping = conversion_mapping.get_checkpoint_conversion_mapping(model_type)
    user_registered = model_type in conversion_mapping.USER_REGISTERED_MAPPINGS
    patch_mappings = monkey_patching.get_patch_mapping()
    try:
        with load_quantizable_moe():
            return AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16)
    finally:
        monkey_patching.clear_patch_mapping()
        monkey_patching.register_patch_mapping(patch_mappings)
        if mapping is None:
            conversion_mapping._checkpoint_conversion_mapping_cache.pop(model_type, None)
        else:
            conversion_mapping.register_checkpoint_conversion_mapping(model_type, mapping, overwrite=True)
        if not user_registered:
            conversion_mapping.USER_REGISTERED_MAPPINGS.discard(model_type)
