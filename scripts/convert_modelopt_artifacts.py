"""Convert the real ModelOpt NVFP4 exports into compressed-tensors checkpoints, with compressed-tensors' own
converter (0.20.1, the producer-ct0201 environment), for the engine tests to serve side by side.

    python scripts/convert_modelopt_artifacts.py ARTIFACTS

Reads ARTIFACTS/modelopt/<export>/ (scripts/make_modelopt_artifacts.py) and
writes ARTIFACTS/modelopt-converted/<export>/ for each export in
``CONVERTED``. The converter targets the projections (``re:.*_proj$``), as
tests/producer/test_modelopt_converter.py explains, and leaves ``lm_head``
alone. Its conversion stores the reciprocals of ModelOpt's per-tensor scales
as compressed-tensors' global scales, so vLLM's emulation of the two
checkpoints, ModelOpt's and compressed-tensors', can be compared.
"""

from __future__ import annotations

import argparse
from pathlib import Path

CONVERTED = ("nvfp4", "dense-nvfp4")
"""The W4A4 NVFP4 exports, MoE and dense, whose every projection is NVFP4."""
TARGETS = ["re:.*_proj$"]


def main(artifacts: Path) -> None:
    from compressed_tensors.entrypoints.convert.convert_checkpoint import convert_checkpoint
    from compressed_tensors.entrypoints.convert.converters.modelopt_nvfp4 import ModelOptNvfp4Converter

    for name in CONVERTED:
        out = artifacts / "modelopt-converted" / name
        converter = ModelOptNvfp4Converter(targets=TARGETS, ignore=["lm_head"])
        convert_checkpoint(artifacts / "modelopt" / name, out, converter, max_workers=1, device="cpu")
        print(out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("artifacts", type=Path)
    main(parser.parse_args().artifacts)
