"""Write the round trip's ModelOpt artifacts in the ModelOpt environment, as files the other environments read.

    python scripts/make_modelopt_artifacts.py OUT

NVIDIA's own exporter (nvidia-modelopt) quantizes the toy Qwen3-MoE and the
dense Llama toy and exports each as ModelOpt's examples do
(``scalar_scales_testkit.modelopt_exports``): OUT/modelopt/<export>/ for each
export, OUT/modelopt/bf16-<toy>/ for the unquantized models, and
OUT/modelopt/producer.json (the versions that wrote them).
"""

from __future__ import annotations

import argparse
import json
from importlib import metadata
from pathlib import Path

from scalar_scales_testkit.modelopt_exports import EXPORTS, export
from scalar_scales_testkit.toys import build_toy


def main(out: Path) -> None:
    root = out / "modelopt"
    root.mkdir(parents=True, exist_ok=True)
    bf16 = {}
    for name, spec in EXPORTS.items():
        if spec.toy not in bf16:
            bf16[spec.toy] = build_toy(spec.toy, root / f"bf16-{spec.toy}")
        export(name, bf16[spec.toy], root / name)
    packages = ("torch", "transformers", "nvidia-modelopt")
    (root / "producer.json").write_text(json.dumps({p: metadata.version(p) for p in packages}, sort_keys=True))
    print(root)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    main(parser.parse_args().out)
