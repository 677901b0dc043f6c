"""`check`'s machine-readable output held to its schemas: the JSON document to the schema the package ships
(draft 2020-12), and SARIF to OASIS's SARIF 2.1.0 schema (tests/publishing/schemas/README.md says whence)."""

from __future__ import annotations

import json
import math
import struct
from functools import partial
from pathlib import Path

import jsonschema
import pytest

from scalar_scales.doctor.report import SCHEMA_VERSION, schema_text
from scalar_scales.nvfp4 import COMPRESSED_TENSORS_LAYOUT
from scalar_scales.sources import read_headers
from scalar_scales_testkit.broken import CORPUS, clean_checkpoint, mla_checkpoint
from scalar_scales_testkit.cli import make_checkpoint, run_cli, shards

SARIF_SCHEMA = Path(__file__).parent / "schemas" / "sarif-schema-2.1.0.json"


def report_schema() -> dict:
    return json.loads(schema_text())


def nan_scale(checkpoint: Path) -> Path:
    shard = shards(checkpoint)[0]
    header = read_headers(shard)[0]
    entry = header.tensors[next(n for n in header.names if n.endswith("input_global_scale"))]
    raw = bytearray(shard.read_bytes())
    raw[header.data_start + entry.begin : header.data_start + entry.end] = struct.pack("<f", math.nan)
    shard.write_bytes(bytes(raw))
    return checkpoint


def _broken(case, folder: Path) -> Path:
    checkpoint = clean_checkpoint(folder)
    case.make(checkpoint, COMPRESSED_TENSORS_LAYOUT)
    return checkpoint


def _unquantized(checkpoint: Path) -> Path:
    config = json.loads((checkpoint / "config.json").read_text())
    del config["quantization_config"]
    (checkpoint / "config.json").write_text(json.dumps(config))
    return checkpoint


CHECKPOINTS = {
    "clean": lambda folder: clean_checkpoint(folder),
    "legacy": lambda folder: make_checkpoint(folder),
    "broken": lambda folder: nan_scale(make_checkpoint(folder)),
    "bf16-nothing-checked": lambda folder: _unquantized(clean_checkpoint(folder)),
    "not-loaded-by-sglang": lambda folder: mla_checkpoint(folder, "Glm4MoeLiteForCausalLM"),
    **{f"corpus-{name}": partial(_broken, case) for name, case in CORPUS.items()},
}


def test_the_shipped_schema_is_a_valid_draft_2020_12_schema_of_this_version():
    schema = report_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema_version"] == {"const": SCHEMA_VERSION}


@pytest.mark.parametrize("options", [[], ["--list"]], ids=["plain", "list"])
@pytest.mark.parametrize("name", CHECKPOINTS)
def test_a_json_report_validates_against_the_shipped_schema(tmp_path, name, options):
    checkpoint = CHECKPOINTS[name](tmp_path / "ckpt")
    result = run_cli("check", checkpoint, "--output-format", "json", *options)
    assert result.returncode in (0, 1), result.stderr
    document = json.loads(result.stdout)
    jsonschema.Draft202012Validator(report_schema()).validate(document)
    assert ("scales" in document) == bool(options)


def test_the_schema_refuses_a_document_without_its_version(tmp_path):
    document = json.loads(run_cli("check", make_checkpoint(tmp_path / "ckpt"), "--json").stdout)
    del document["schema_version"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(report_schema()).validate(document)


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_a_sarif_report_validates_against_the_sarif_2_1_0_schema(tmp_path, name):
    checkpoint = CHECKPOINTS[name](tmp_path / "ckpt")
    result = run_cli("check", checkpoint, "--output-format", "sarif")
    assert result.returncode in (0, 1), result.stderr
    log = json.loads(result.stdout)
    jsonschema.Draft4Validator(json.loads(SARIF_SCHEMA.read_text())).validate(log)
    assert log["version"] == "2.1.0"


def test_the_schema_ships_in_the_package_next_to_its_module():
    import scalar_scales.doctor.report as report

    assert (Path(report.__file__).parent / "check-report.schema.json").read_text() == schema_text()


def test_the_engine_refusal_case_fills_not_loaded_by(tmp_path):
    """The case above that validates `not_loaded_by` with an entry in it: SGLang's refusal of GLM's 0-D scales."""
    checkpoint = CHECKPOINTS["not-loaded-by-sglang"](tmp_path / "ckpt")
    document = json.loads(run_cli("check", checkpoint, "--json").stdout)
    assert [entry["consumer"] for entry in document["not_loaded_by"]]


@pytest.fixture(scope="module")
def hub_reports(tmp_path_factory) -> dict[str, dict]:
    """The JSON document and the SARIF log of a legacy checkpoint checked as ``hf://org/model@main`` on the test
    kit's stand-in Hub: the reports whose `commit`, `bytes_*`, `HFREPO` base and `versionControlProvenance` are set."""
    pytest.importorskip("huggingface_hub")
    from scalar_scales_testkit.hub_server import HubRepository, client_environment, serve_hub

    folder = tmp_path_factory.mktemp("hub")
    checkpoint = make_checkpoint(folder / "ckpt")
    reports = {}
    with serve_hub({"org/model": HubRepository({"main": checkpoint})}) as (endpoint, _):
        env = client_environment(endpoint, folder)
        for output_format in ("json", "sarif"):
            result = run_cli("check", "hf://org/model@main", "--output-format", output_format, env=env)
            assert result.returncode == 0, result.stderr
            reports[output_format] = json.loads(result.stdout)
    return reports


def test_a_hub_json_report_validates_against_the_shipped_schema(hub_reports):
    document = hub_reports["json"]
    jsonschema.Draft202012Validator(report_schema()).validate(document)
    summary = document["summary"]
    assert summary["commit"] and summary["bytes_fetched"] and summary["bytes_total"]


def test_a_hub_sarif_report_validates_against_the_sarif_2_1_0_schema(hub_reports):
    log = hub_reports["sarif"]
    jsonschema.Draft4Validator(json.loads(SARIF_SCHEMA.read_text())).validate(log)
    (run,) = log["runs"]
    assert "HFREPO" in run["originalUriBaseIds"] and run["versionControlProvenance"]
    assert run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uriBaseId"] == "HFREPO"
