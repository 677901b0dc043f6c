"""The artifacts themselves: each form's global-scale layout and marker, identical across producers and routes.

Needs only the torch-free header reader, so it runs once, in the producer
environment; it records each artifact's layout for docs/compatibility.md.
"""

from __future__ import annotations

import json

from scalar_scales.nvfp4 import is_global_scale
from scalar_scales.sources import CONFIG_NAME, declaration, read_config
from scalar_scales_testkit.checkpoints import described, quantization_config, tensor_bytes, tensor_entries
from scalar_scales_testkit.cli import run_cli
from scalar_scales_testkit.roundtrip import MIGRATED, Result

LAYOUT = {"legacy": ("(1,)", 1), "format2": ("()", 2), "legacy-migrated": ("()", 2), "format2-to-legacy": ("(1,)", 1)}
"""Form -> (shape of every global scale on disk, format_version)."""


def test_every_form_has_its_global_scale_layout_and_marker(artifact):
    shapes = [e.shape for name, e in tensor_entries(artifact.path).items() if is_global_scale(name)]
    declared = declaration(read_config(artifact.path), artifact.path / CONFIG_NAME)
    layout = " ".join(sorted({str(shape) for shape in shapes})), declared.format_version
    details = {"disk_shape": layout[0], "format_version": layout[1], "global_scales": len(shapes)}
    producer = json.loads((artifact.path.parent / "producer.json").read_text())
    Result("artifact", "none", artifact, loads=True, details=details).record("artifact", versions=producer)
    assert layout == LAYOUT[artifact.form]


def test_a_migrated_artifact_equals_its_natively_written_twin(migrated):
    twin = migrated.in_form(MIGRATED[migrated.form])
    assert described(migrated.path) == described(twin.path)
    assert tensor_bytes(migrated.path) == tensor_bytes(twin.path)
    assert quantization_config(migrated.path) == quantization_config(twin.path)


def test_every_producer_writes_the_same_tensors(across_producers):
    """compressed-tensors 0.19.0, 0.20.0 and 0.20.1 write byte-identical shards; only config.json's details differ."""
    first, *others = across_producers
    assert others, "the round trip needs artifacts from more than one producer"
    for other in others:
        assert (described(other.path), tensor_bytes(other.path)) == (described(first.path), tensor_bytes(first.path))


def test_check_finds_only_the_legacy_layout_in_what_llm_compressor_writes(artifact):
    """Real oneshot artifacts hold no false positive: fused partners share their scales (llm-compressor fuses
    them), values are compressed-tensors' convention, shapes and dtypes fit. Only the layout differs by form."""
    result = run_cli("check", artifact.path, "--json")
    counts = json.loads(result.stdout)["summary"]["counts"]
    if LAYOUT[artifact.form][0] == "(1,)":
        assert set(counts) == {"NV101"} and result.returncode == 0, result.stdout[:2000]  # NV101 is a warning
    else:
        assert counts == {} and result.returncode == 0, result.stdout[:2000]
