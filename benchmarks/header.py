"""The header reader against the floor: a plain ``json.loads`` of the header and a ``struct`` read of every scale.

Two shards, each of 200,000 F32 per-tensor scales (the global scales of
25,000 layers x experts x 4 NVFP4 projections' inputs and weights) and a few
larger tensors (embedding, norm, head), their data written out (about 1 MB):

- ``spaced``: the header written by ``json.dumps(header, indent=1)``, as
  writers other than the reference do;
- ``compact``: the same header in the reference writer's compact layout.

For each shard, side by side, alternately, ``--repeats`` times each:

- ``floor``: open the file, ``json.loads`` its header with no validation,
  read the data section and every scale's value with ``struct``;
- ``ours``: the same, with :func:`~scalar_scales.files.header.read_header`
  (the full validation) for ``json.loads``;
- with ``--baseline FILE``, ``base``: the same with the ``read_header`` of
  another version of ``scalar_scales/files/header.py``, imported from
  ``FILE`` (e.g. ``git show HEAD:scalar_scales/files/header.py > /tmp/old/header.py``);
- ``loads`` and ``parse`` (and ``base parse``): ``json.loads`` and
  :func:`~scalar_scales.files.header.parse_header` on the header bytes alone.

Then ``read_header`` over every shard of a checkpoint (``--checkpoint``;
by default the synthetic V4-Flash-shaped one, 46 shards, written to a temporary
folder with its data as sparse holes), alone and with the shape positions an
in-place edit needs (``shape_spans``), as ``migrate`` plans it.

Times are this process's CPU time (``time.process_time``), which other load
on a shared machine disturbs less than wall time; the table gives medians
(ms) and each contender's ratio to the floor (or to ``read_header`` for the
checkpoint). Targets: ``ours`` at most 2.0x the floor
on the spaced shard, and no slower than the baseline on the compact shard and
the checkpoint. ``--memory`` adds the peak memory ``tracemalloc`` sees while
each reader reads the spaced shard once (slower; not timed).

    OMP_NUM_THREADS=1 python benchmarks/header.py [--repeats 7] [--baseline FILE] [--checkpoint DIR] [--memory]
        [--part all|checkpoint|shards]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import random
import statistics
import struct
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from scalar_scales.files.header import SafetensorsHeader, ending_with, parse_header, read_header

SCALES = 200_000
SUFFIX = "_global_scale"
PROJECTIONS = ("gate_proj", "up_proj", "down_proj", "o_proj")
EXPERTS = 256


def shard_header(scales: int) -> tuple[dict[str, dict[str, object]], bytes]:
    """A header of ``scales`` F32 scales and a few larger tensors, and the data section it describes."""
    rng = random.Random(0)
    entries: dict[str, dict[str, object]] = {}
    data = bytearray()

    def add(name: str, dtype: str, shape: list[int], payload: bytes) -> None:
        entries[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data.extend(payload)

    add("model.embed_tokens.weight", "BF16", [256, 64], bytes(256 * 64 * 2))
    per_layer = EXPERTS * len(PROJECTIONS) * 2
    for i in range(scales):
        layer, rest = divmod(i, per_layer)
        expert, rest = divmod(rest, len(PROJECTIONS) * 2)
        projection, kind = divmod(rest, 2)
        module = f"model.layers.{layer}.mlp.experts.{expert}.{PROJECTIONS[projection]}"
        add(f"{module}.{('input', 'weight')[kind]}{SUFFIX}", "F32", [1], struct.pack("<f", rng.uniform(1, 4096)))
    add("model.norm.weight", "BF16", [64], bytes(128))
    add("lm_head.weight", "BF16", [256, 64], bytes(256 * 64 * 2))
    return entries, bytes(data)


def write_shard(path: Path, entries: dict[str, dict[str, object]], data: bytes, *, spaced: bool) -> Path:
    document = {"__metadata__": {"format": "pt"}, **entries}
    text = json.dumps(document, indent=1) if spaced else json.dumps(document, separators=(",", ":"))
    raw = text.encode() + b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def floor(path: Path) -> list[float]:
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        document = json.loads(f.read(length))
        data = f.read()
    return [
        struct.unpack_from("<f", data, entry["data_offsets"][0])[0]
        for name, entry in document.items()
        if name.endswith(SUFFIX)
    ]


Reader = Callable[[Path], SafetensorsHeader]


def with_reader(reader: Reader) -> Callable[[Path], list[float]]:
    def run(path: Path) -> list[float]:
        header = reader(path)
        with open(path, "rb") as f:
            f.seek(header.data_start)
            data = f.read()
        begins = header.begins
        return [struct.unpack_from("<f", data, begins[i])[0] for i in ending_with(header.names, SUFFIX)]

    return run


def header_bytes(path: Path) -> tuple[bytes, int]:
    content = path.read_bytes()
    (length,) = struct.unpack("<Q", content[:8])
    return content[8 : 8 + length], len(content)


def timed_alternately(contenders: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Each contender's median time in ms, run in turn ``repeats`` times (the order rotating each round)."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for round_ in range(repeats):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            gc.collect()
            start = time.process_time()
            contenders[name]()
            times[name].append(time.process_time() - start)
    return {name: statistics.median(values) * 1000 for name, values in times.items()}


def load_module(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("baseline_header", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def table(title: str, medians: dict[str, float], reference: str) -> None:
    print(f"\n{title}")
    for name, ms in medians.items():
        print(f"  {name:<22} {ms:9.1f} ms  {ms / medians[reference]:5.2f}x {reference}")


def peak_mib(run: Callable[[], object]) -> float:
    gc.collect()
    tracemalloc.start()
    run()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--baseline", help="another version of scalar_scales/files/header.py to compare with")
    parser.add_argument("--checkpoint", type=Path, help="a checkpoint folder (default: a synthetic V4-Flash one)")
    parser.add_argument("--memory", action="store_true", help="also the peak memory of reading the spaced shard")
    parser.add_argument("--scales", type=int, default=SCALES)
    parser.add_argument("--part", choices=("all", "checkpoint", "shards"), default="all", help="time only one part")
    args = parser.parse_args()
    base = load_module(args.baseline) if args.baseline else None

    with tempfile.TemporaryDirectory() as folder:
        # The checkpoint first: the large shards leave the allocator's arenas fragmented, which slows the
        # many small allocations of what runs after them in the same process.
        if args.part in ("all", "checkpoint"):
            time_checkpoint(args.checkpoint or synthetic_checkpoint(Path(folder)), base, args.repeats)
        if args.part in ("all", "shards"):
            time_shards(Path(folder), args.scales, base, args.repeats, args.memory)


def synthetic_checkpoint(folder: Path) -> Path:
    from scalar_scales_testkit.synthetic import write_synthetic_checkpoint

    return write_synthetic_checkpoint(folder / "v4", data_bytes=400_000_000, sparse=True)


def time_checkpoint(checkpoint: Path, base: ModuleType | None, repeats: int) -> None:
    files = sorted(Path(checkpoint).glob("*.safetensors"))

    def every(reader: Reader, spans: bool) -> Callable[[], None]:
        def run() -> None:
            for file in files:  # one at a time, as check and migrate read them
                header = reader(file)
                if spans:
                    header.shape_spans  # noqa: B018

        return run

    contenders = {"read_header": every(read_header, False), "read_header+spans": every(read_header, True)}
    if base is not None:
        contenders["base read_header"] = every(base.read_header, False)
        contenders["base read_header+spans"] = every(base.read_header, True)
    medians = timed_alternately(contenders, repeats)
    table(f"{checkpoint}: {len(files)} shards (median of {repeats})", medians, "read_header")


def time_shards(folder: Path, scales: int, base: ModuleType | None, repeats: int, memory: bool) -> None:
    entries, data = shard_header(scales)
    shards = {
        layout: write_shard(folder / f"{layout}.safetensors", entries, data, spaced=layout == "spaced")
        for layout in ("spaced", "compact")
    }
    del entries
    for layout, path in shards.items():
        raw, size = header_bytes(path)
        assert floor(path) == with_reader(read_header)(path)
        contenders: dict[str, Callable[[], object]] = {
            "floor": lambda path=path: floor(path),
            "ours": lambda path=path: with_reader(read_header)(path),
            "loads": lambda raw=raw: json.loads(raw),
            "parse": lambda path=path, raw=raw, size=size: parse_header(path, raw, size),
        }
        if base is not None:
            contenders["base"] = lambda path=path: with_reader(base.read_header)(path)
            contenders["base parse"] = lambda path=path, raw=raw, size=size: base.parse_header(path, raw, size)
        print(f"\n{layout}: {scales:,} scales, header {len(raw):,} bytes")
        medians = timed_alternately(contenders, repeats)
        table(f"{layout} shard (median of {repeats})", medians, "floor")
        print(f"  parse / loads: {medians['parse'] / medians['loads']:.2f}x", end="")
        if base is not None:
            print(f"; base parse / loads: {medians['base parse'] / medians['loads']:.2f}x", end="")
        print()
    if memory:
        spaced = shards["spaced"]
        print(f"\npeak memory reading the spaced shard: floor {peak_mib(lambda: floor(spaced)):.0f} MiB", end="")
        print(f", ours {peak_mib(lambda: read_header(spaced)):.0f} MiB", end="")
        if base is not None:
            print(f", base {peak_mib(lambda: base.read_header(spaced)):.0f} MiB", end="")
        print()


if __name__ == "__main__":
    main()
