"""Whether the doctor's own pattern automaton (``scalar_scales.doctor.patterns``) pays against plain ``re.match``.

compressed-tensors and vLLM match a config's ``re:`` targets and ``ignore``
entries with ``re.match``; the plain version of the doctor would do the same,
each pattern compiled once and matched against each module name. Two cases,
side by side, alternately, ``--repeats`` times each:

- ``v4-flash``: the module names of a V4-Flash-shaped checkpoint (43 layers,
  256 routed experts and a shared one, the attention projections) against a
  llm-compressor NVFP4 preset's patterns (``re:.*mlp.gate$`` and the like):
  what every ``check`` of such a checkpoint does. The automaton must be no
  slower than ``re`` here for the plain version to have no claim on speed.
- ``hostile``: ``re:model\\.(a+)+b``, which a hostile config may hold, against
  one module named ``model.`` and N ``a``: ``re.match`` backtracks through
  2^N splits, the automaton takes one step per character. This is why the
  doctor never runs a config's pattern through ``re``: a checkpoint chooses
  both the patterns and the names, and the plain version would let a 40-byte
  name hang ``check``.

Times are this process's CPU time (``time.process_time``), medians in ms.

    OMP_NUM_THREADS=1 python benchmarks/patterns.py [--repeats 5] [--hostile 16 18 20 22]
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections.abc import Callable

from scalar_scales.doctor.patterns import PatternSet

LAYERS, EXPERTS = 43, 256
PRESET = [r".*mlp\.gate$", r".*shared_expert_gate$", r".*lm_head", r".*self_attn\..*_a_proj$", r".*indexer.*"]
"""llm-compressor's NVFP4 presets ignore the router, the head and (for MLA) the a-projections."""


def v4_flash_modules() -> list[str]:
    names = []
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}"
        names += [
            f"{prefix}.self_attn.{p}" for p in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")
        ]
        names.append(f"{prefix}.mlp.gate")
        for expert in [*(f"experts.{e}" for e in range(EXPERTS)), "shared_experts"]:
            names += [f"{prefix}.mlp.{expert}.{p}" for p in ("gate_proj", "up_proj", "down_proj")]
    return [*names, "lm_head"]


def with_re(patterns: list[str]) -> Callable[[list[str]], list[frozenset[int]]]:
    compiled = [re.compile(p) for p in patterns]

    def run(names: list[str]) -> list[frozenset[int]]:
        return [frozenset(i for i, c in enumerate(compiled) if c.match(name)) for name in names]

    return run


def with_automaton(patterns: list[str]) -> Callable[[list[str]], list[frozenset[int]]]:
    def run(names: list[str]) -> list[frozenset[int]]:
        automaton = PatternSet(patterns)  # built per check, as the doctor builds it
        return [automaton.matching(name) for name in names]

    return run


def timed(run: Callable[[list[str]], list[frozenset[int]]], names: list[str]) -> tuple[float, list[frozenset[int]]]:
    start = time.process_time()
    found = run(names)
    return (time.process_time() - start) * 1000, found


def compare(label: str, patterns: list[str], names: list[str], repeats: int) -> None:
    contenders = {"re.match": with_re(patterns), "automaton": with_automaton(patterns)}
    times: dict[str, list[float]] = {name: [] for name in contenders}
    verdicts = {}
    for _ in range(repeats):
        for name, run in contenders.items():
            took, verdicts[name] = timed(run, names)
            times[name].append(took)
    assert verdicts["re.match"] == verdicts["automaton"], f"{label}: the two disagree"
    floor = statistics.median(times["re.match"])
    cells = "  ".join(
        f"{n} {statistics.median(t):9.1f} ms ({statistics.median(t) / floor:5.2f}x)" for n, t in times.items()
    )
    print(f"{label:<24} {cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hostile", type=int, nargs="*", default=[16, 18, 20, 22])
    args = parser.parse_args()
    modules = v4_flash_modules()
    compare(f"v4-flash ({len(modules)} modules)", PRESET, modules, args.repeats)
    for length in args.hostile:
        compare(f"hostile, {length} a", [r"model\.(a+)+b"], [f"model.{'a' * length}"], max(1, args.repeats // 2))


if __name__ == "__main__":
    main()
