"""Record the fingerprints of the upstream code the producer patch wraps or depends on, as installed here.

    python scripts/fingerprints.py            # add this environment's to compressed_tensors_patch/tested_upstream.py
    python scripts/fingerprints.py --check    # exit 1 if this environment's are not recorded (the file is stale)

Run it in each producer environment the tests run in (scripts/envs.sh); a
release whose code equals a recorded one needs no entry of its own to be
accepted, but is labelled as tested only once recorded. The file is written,
never edited by hand.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import compressed_tensors_patch
from compressed_tensors_patch.tested_upstream import TESTED
from compressed_tensors_patch.versions import distribution_of, fingerprint

RECORD = Path(compressed_tensors_patch.__file__).with_name("tested_upstream.py")
HEADER = '''"""Fingerprints of the upstream code the producer patch was tested against. Generated; do not edit.

Written by ``scripts/fingerprints.py`` in each test environment (see
``compressed_tensors_patch.versions``): target -> fingerprint -> releases.
"""

TESTED: dict[str, dict[str, tuple[str, ...]]] = '''


def here() -> dict[str, tuple[str, str]]:
    """target -> (fingerprint, release) for this environment."""
    found = {}
    for target in compressed_tensors_patch.upstream_code():
        code = fingerprint(target)
        if code is None:
            sys.exit(f"fingerprints: {target} is not installed here; nothing recorded")
        found[target] = (code, distribution_of(target))
    return found


def rendered(record: dict[str, dict[str, tuple[str, ...]]]) -> str:
    """The record as Python source: one target, then one fingerprint and its releases, a line."""
    lines = ["{"]
    for target in sorted(record):
        lines.append(f"    {json.dumps(target)}: {{")
        for code, releases in sorted(record[target].items()):
            quoted = ", ".join(map(json.dumps, releases)) + ("," if len(releases) == 1 else "")
            lines.append(f"        {json.dumps(code)}: ({quoted}),")
        lines.append("    },")
    return "\n".join([*lines, "}"]) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether this environment is recorded")
    args = parser.parse_args()
    current = here()
    missing = [t for t, (code, release) in current.items() if release not in TESTED.get(t, {}).get(code, ())]
    if args.check:
        for target in missing:
            print(f"fingerprints: {target} ({current[target][1]}) is not recorded; run scripts/fingerprints.py")
        return 1 if missing else 0
    record = {target: {code: tuple(releases) for code, releases in codes.items()} for target, codes in TESTED.items()}
    for target, (code, release) in current.items():
        releases = record.setdefault(target, {}).setdefault(code, ())
        record[target][code] = tuple(sorted({*releases, release}))
    RECORD.write_text(HEADER + rendered(record))
    print(f"{RECORD}: {len(missing)} of {len(current)} fingerprints added")
    return 0


if __name__ == "__main__":
    sys.exit(main())
