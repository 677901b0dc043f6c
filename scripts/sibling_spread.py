"""How far the global scales of real checkpoints lie from their siblings' median: the figures NV305's explanation
gives for its bars (``scalar_scales.doctor.sibling_rules``).

    python scripts/sibling_spread.py ROOT...    every NVFP4 checkpoint under each ROOT (a folder with config.json)

For each layout, leaf and kind of group (a layer's experts, or one projection
across layers): how many groups, the largest distance of a member from its
group's median in decades (median, 90th percentile, largest), the median
absolute deviation, how many groups have none, and the largest finite
modified z-score (0.6745 * distance / MAD). Run it on the test command's
artifacts (``SCALAR_SCALES_ARTIFACTS``), or on every run's cached under
``~/.cache/scalar-scales/outputs``.
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from pathlib import Path

from scalar_scales.doctor import diagnose
from scalar_scales.doctor.sibling_rules import sibling_groups
from scalar_scales.sources import open_checkpoint

Row = tuple[float, float, float]
"""A group's largest distance from its median and its median absolute deviation (decades), and its largest
modified z-score."""


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


def _row(values: list[float]) -> Row:
    logs = [math.log10(value) for value in values]
    median = _median(logs)
    distances = [abs(log - median) for log in logs]
    spread = _median(distances)
    z = max((0.6745 * d / spread if spread else (math.inf if d else 0.0)) for d in distances)
    return max(distances), spread, z


def main(roots: list[str]) -> None:
    rows: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    checkpoints = 0
    for root in roots:
        for config in sorted(Path(root).rglob("config.json")):
            if not any(config.parent.glob("*.safetensors")):
                continue
            view = diagnose(open_checkpoint(config.parent), codes=()).view
            if view.layout is None:
                continue
            checkpoints += 1
            for leaf in (view.layout.weight_global, view.layout.input_global):
                for group in sibling_groups(view, leaf):
                    kind = "experts" if group.experts else "layers"
                    rows[(view.layout.producer, leaf, kind)].append(_row(group.values))
    print(f"{checkpoints} NVFP4 checkpoints, {sum(map(len, rows.values()))} groups of siblings")
    for (producer, leaf, kind), found in sorted(rows.items()):
        widest = sorted(row[0] for row in found)
        finite = [row[2] for row in found if row[2] != math.inf]
        print(
            f"{producer} {leaf} ({kind}): {len(found)} groups; largest distance from the median "
            f"{widest[len(widest) // 2]:.3f} / {widest[int(0.9 * (len(widest) - 1))]:.3f} / {widest[-1]:.3f} decades "
            f"(median / 90th percentile / largest); MAD up to {max(row[1] for row in found):.3f}, "
            f"none in {sum(row[1] == 0 for row in found)}; modified z-score up to {max(finite, default=0.0):.1f}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
