"""Helpers for the producer tests: load the toy model and quantize it through each save path."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from llmcompressor import oneshot
from llmcompressor.entrypoints.model_free import model_free_ptq
from transformers import AutoModelForCausalLM

import compressed_tensors_patch
from scalar_scales import toy_moe

SAVE_PATH_CASES: list[tuple[str, str]] = [
    ("NVFP4", "save_pretrained"),
    ("NVFP4", "output_dir"),
    ("NVFP4A16", "save_pretrained"),
    ("NVFP4A16", "output_dir"),
    ("NVFP4A16", "model_free"),
]
"""(scheme, save path) pairs: the model-free path cannot calibrate activations, so it has no NVFP4 (W4A4) artifact."""


def differing(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    """Names of the parameters whose dtype or values differ between two loads of the same model."""
    assert a.keys() == b.keys()
    return [n for n in a if a[n].dtype != b[n].dtype or not torch.equal(a[n].reshape(-1), b[n].reshape(-1))]


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
        model = toy_moe.load_reference(path).to(device)
        with torch.no_grad():
            logits = model(prompt_ids).logits.float()
    finally:
        compressed_tensors_patch.revert()
    return {name: p.detach() for name, p in model.named_parameters()}, logits


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
