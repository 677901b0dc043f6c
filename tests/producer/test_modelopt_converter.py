"""check's ModelOpt verdicts held to compressed-tensors' own ModelOpt converter (0.20.1's ``entrypoints/convert``,
``ModelOptNvfp4Converter``): a real ModelOpt export (scripts/make_modelopt_artifacts.py), broken one way at a time,
and its conversion get the same findings, or the converter refuses what check reports.

The converter targets the export's projections (``re:.*_proj$``): a real export also holds norms, embeddings and
routers, and ``re:.*`` makes the converter look for their scales (``Dependency weight
model.layers.0.input_layernorm.weight_scale_2 not found``). The conversion writes divisors (1/x of ModelOpt's
multipliers, in their shape) and no ``format_version``: NV103, information, and exit 0 on the intact export. The
breaks of the declaration (the config rules' examples) are not compared: the converter writes the declaration its
arguments give, not the checkpoint's.
"""

from __future__ import annotations

import json

import pytest

from scalar_scales.nvfp4 import MODELOPT_LAYOUT
from scalar_scales_testkit.broken import MODELOPT_CORPUS
from scalar_scales_testkit.cli import run_cli
from scalar_scales_testkit.modelopt_exports import copy_of_export

convert = pytest.importorskip(
    "compressed_tensors.entrypoints.convert.convert_checkpoint", reason="compressed-tensors 0.20.1's converter"
)
from compressed_tensors.entrypoints.convert.converters.modelopt_nvfp4 import ModelOptNvfp4Converter  # noqa: E402

TARGETS = ["re:.*_proj$"]
CASES = [pytest.param(None, id="intact")] + [
    pytest.param(case, id=name) for name, case in MODELOPT_CORPUS.items() if not case.edits_declaration
]


def verdict(checkpoint):
    result = run_cli("check", checkpoint, "--json")
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, {finding["code"] for finding in json.loads(result.stdout)["findings"]}


def converted(modelopt, out):
    converter = ModelOptNvfp4Converter(targets=TARGETS, ignore=["lm_head"])
    convert.convert_checkpoint(modelopt, out, converter, max_workers=1, device="cpu")
    return out


@pytest.mark.parametrize("case", CASES)
def test_a_modelopt_export_and_its_conversion_get_the_same_verdict(tmp_path, case):
    modelopt = copy_of_export(tmp_path / "modelopt")
    if case is not None:
        case.make(modelopt, MODELOPT_LAYOUT)
    exit_code, codes = verdict(modelopt)
    try:
        converted(modelopt, tmp_path / "converted")
    except ValueError:
        assert codes, "the converter refuses a checkpoint check finds nothing in"
        return
    unmarked = set() if "NV101" in codes else {"NV103"}  # (1,) scales stay (1,), and NV103 is for 0-D ones
    assert verdict(tmp_path / "converted") == (exit_code, codes | unmarked)


def test_a_conversion_is_judged_by_its_compressed_tensors_config_not_the_hf_quant_config_json_it_copies(tmp_path):
    """The converter copies the export's hf_quant_config.json, which still declares ModelOpt NVFP4; vLLM reads
    config.json's quantization_config first, and so does check: the verdict is the same without the stale file."""
    conversion = converted(copy_of_export(tmp_path / "modelopt"), tmp_path / "converted")
    stale = conversion / "hf_quant_config.json"
    assert json.loads(stale.read_text())["quantization"]["quant_algo"] == "NVFP4"
    with_stale = json.loads(run_cli("check", conversion, "--json").stdout)
    stale.unlink()
    assert with_stale["findings"] == json.loads(run_cli("check", conversion, "--json").stdout)["findings"]
    assert with_stale["summary"]["producer"] == "compressed-tensors"
