"""check's ModelOpt verdicts held to compressed-tensors' own ModelOpt converter (0.20.1's ``entrypoints/convert``,
``ModelOptNvfp4Converter``): a broken ModelOpt checkpoint and its conversion get the same findings, or the converter
refuses what check reports.

The conversion writes divisors (1/x of ModelOpt's multipliers, in their shape) and no ``format_version``: NV103,
information, and exit 0 on the intact checkpoint. The config rules (NV601, NV602, NV605, NV607) are not compared:
the converter writes the declaration its arguments give, not the checkpoint's.
"""

from __future__ import annotations

import json

import pytest

from scalar_scales.nvfp4 import MODELOPT_LAYOUT
from scalar_scales_testkit.broken import MODELOPT_CORPUS, clean_modelopt_checkpoint
from scalar_scales_testkit.cli import run_cli

convert = pytest.importorskip(
    "compressed_tensors.entrypoints.convert.convert_checkpoint", reason="compressed-tensors 0.20.1's converter"
)
from compressed_tensors.entrypoints.convert.converters.modelopt_nvfp4 import ModelOptNvfp4Converter  # noqa: E402

CONFIG_RULES = {"NV601", "NV602", "NV605", "NV607"}
CASES = [pytest.param(None, id="intact")] + [
    pytest.param(case, id=name) for name, case in MODELOPT_CORPUS.items() if case.code not in CONFIG_RULES
]


def verdict(checkpoint):
    result = run_cli("check", checkpoint, "--json")
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, {finding["code"] for finding in json.loads(result.stdout)["findings"]}


@pytest.mark.parametrize("case", CASES)
def test_a_modelopt_checkpoint_and_its_conversion_get_the_same_verdict(tmp_path, case):
    modelopt = clean_modelopt_checkpoint(tmp_path / "modelopt")
    if case is not None:
        case.make(modelopt, MODELOPT_LAYOUT)
    exit_code, codes = verdict(modelopt)
    converter = ModelOptNvfp4Converter(targets=["re:.*"], ignore=["lm_head"])
    try:
        convert.convert_checkpoint(modelopt, tmp_path / "converted", converter, max_workers=1, device="cpu")
    except ValueError:
        assert codes, "the converter refuses a checkpoint check finds nothing in"
        return
    unmarked = set() if "NV101" in codes else {"NV103"}  # (1,) scales stay (1,), and NV103 is for 0-D ones
    assert verdict(tmp_path / "converted") == (exit_code, codes | unmarked)
