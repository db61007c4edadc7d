"""Data mixtures: the cost of a scheduled, stratified blend, and token weights with packing.

1. **Draws/s.** ``WeightedBlend`` over the real Readers of two prepared caption datasets
   (tar shards, raw samples: no decode, so the blend's own work is as visible as it can
   be), today's blend (fixed weights 9:1, each sample drawn by weight) against blends whose
   weights are schedules with ``composition="stratified"`` in batches of 32: one holding
   9:1 (the same sources read as today's, so only the blend's work differs) and one
   ramping 9:1 to 1:9 over the measured steps (it reads both datasets more evenly). Both loops set the batch index every 32
   draws (what ``Batch`` does). ``--draws`` draws per variant and round, timed in process
   CPU time (the machine is shared) in 20 chunks per round that alternate the variants
   (A/B, the order rotating); per round draws/s, then medians, the spread (min-max of the
   rounds) and the ratio. The schedule ramps over all the rounds' steps. ``--baseline``
   adds the blend of another version (before this change) to the same rounds. A cost
   model beside the A/B rounds, which the shared machine's load hardly moves: each
   blend's own CPU time per draw over two sources that hand out one item at no cost,
   as a share of a draw with its Reader.
2. **Token shares.** Two text datasets of one-letter-word "tokens", ``short`` (median 250,
   lognormal) and ``long`` (median 1500), blended 50:50, packed by best fit into sequences
   of 4096 over a packing buffer of 200, batches of 8 sequences, ``--packs`` (10,000)
   sequences, in one process: once with ``weight_unit: tokens`` and once with the weights on
   samples (today). Reported: each source's share of the delivered tokens and samples,
   from the packs' members (every member carries its source and length).

Scratch data goes to ``--data`` (default /tmp/bench_mix). Usage::

    git show main:energon_lite/stages/blend_weighted.py > /tmp/before.py
    python benchmarks/bench_mix.py [--rounds 5] [--draws 100000] [--packs 10000] \
        [--baseline /tmp/before.py]
"""

from __future__ import annotations

import argparse
import io
import math
import os
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from common import ab_order, fmt_num, markdown_table, median, ratio

import energon_lite as el
from energon_lite.metadataset.schedule import WeightSchedule
from energon_lite.rng import rng_for
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.stages.base import Stage
from energon_lite.stages.blend_weighted import WeightedBlend
from energon_lite.stages.reader import Reader
from energon_lite.synth.shards import write_captioning_shards
from energon_lite.task_encoder.packing import best_fit

BATCH = 32
BASELINE: list[Any] = []  # WeightedBlend of --baseline, when given
SEQUENCE = 4096
PACK_BATCH = 8


# 1. draws/s -------------------------------------------------------------------------------


def caption_data(root: Path, name: str, count: int) -> PreparedDataset:
    folder = root / name
    if not (folder / ".nv-meta" / "split.yaml").exists():
        write_captioning_shards(folder, count, 1000, image_size=(8, 8), key_format=name + "{:06d}")
        el.prepare_dataset(
            folder,
            split_ratio=[("train", 1)],
            sample_type="CaptioningSample",
            field_map={"image": "jpg", "caption": "txt"},
            progress=False,
        )
    return PreparedDataset(folder, "train")


def blend(
    variant: str, datasets: list[PreparedDataset], draws: int, sources: list[Any] | None = None
) -> WeightedBlend:
    readers = sources or [
        Reader(
            ds,
            leaf_id=i,
            seed=1,
            worker_index=0,
            num_workers=1,
            max_samples_per_sequence=100,
            shuffle=True,
            repeat=True,
            open_slices=4,
        )
        for i, ds in enumerate(datasets)
    ]
    if variant == "today":
        return WeightedBlend(readers, [9, 1], 1, 0)
    if variant == "before":  # the blend_weighted.py given by --baseline (e.g. main's)
        return BASELINE[0](readers, [9, 1], 1, 0)
    end = draws // BATCH
    if variant == "scheduled 9:1+stratified":  # today's mix of sources, by a schedule
        weights = [WeightSchedule([[0, 9], [end, 9]]), WeightSchedule([[0, 1], [end, 1]])]
    else:  # 9:1 ramping to 1:9 over the run
        weights = [WeightSchedule([[0, 9], [end, 1]]), WeightSchedule([[0, 1], [end, 9]])]
    return WeightedBlend(readers, weights, 1, 0, composition="stratified", batch_size=BATCH)


class Timed:
    """One variant's blend, started once, timed in chunks of whole batches."""

    def __init__(self, variant: str, datasets: list[PreparedDataset], draws: int) -> None:
        self.stage = blend(variant, datasets, draws)
        self.stage.restore_state(None)
        self.batch = 0
        self.run(1000 // BATCH)  # warm: open slices, page cache

    def run(self, batches: int) -> float:
        """CPU seconds for ``batches`` batches of draws (the machine is shared: CPU time is
        what the blend costs; wall time adds the other processes' share of the cores)."""
        stage = self.stage
        start = time.process_time()
        for _ in range(batches):
            stage.context.index.batch = self.batch  # as the batching stage above would
            self.batch += 1
            for _ in range(BATCH):
                stage.next()
        return time.process_time() - start


def draws_round(
    variants: tuple[str, ...], timed: dict[str, Timed], draws: int, r: int, chunks: int = 20
) -> dict[str, float]:
    """Draws per CPU second of each variant over ``draws`` draws, alternating the variants
    every ``draws / chunks`` draws (A/B inside the round, the order rotating), so that a
    change of the machine's load falls on both alike."""
    seconds = dict.fromkeys(variants, 0.0)
    batches = max(1, draws // chunks // BATCH)
    for chunk in range(chunks):
        for variant in ab_order(variants, r + chunk):
            seconds[variant] += timed[variant].run(batches)
    return {v: chunks * batches * BATCH / seconds[v] for v in variants}


class Same(Stage):
    """A source that hands out one item forever: what is left is the blend's own work."""

    def __init__(self, leaf: int) -> None:
        self.leaf_id = leaf  # routes like a Reader
        self.item = {"__key__": f"same{leaf}"}

    def next(self) -> Any:
        return self.item


def own_cost(variants: tuple[str, ...], rounds: int, draws: int = 200_000) -> dict[str, float]:
    """The blend's own CPU ns per draw over sources that cost nothing (median of rounds,
    the variants alternating): a figure the machine's load hardly moves."""
    out: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(rounds):
        for variant in ab_order(variants, r):
            stage = blend(variant, [], draws, sources=[Same(0), Same(1)])
            stage.restore_state(None)
            start = time.process_time()
            for batch in range(draws // BATCH):
                stage.context.index.batch = batch
                for _ in range(BATCH):
                    stage.next()
            out[variant].append((time.process_time() - start) * 1e9 / draws)
    return {v: median(out[v]) or 0.0 for v in variants}


def load_baseline(path: Path) -> Any:
    """The ``WeightedBlend`` class of another version's ``blend_weighted.py``, renamed
    ``WeightedBlendBefore`` (a stage registers itself by class name: two of one name
    would make states unreadable). It imports the rest of energon_lite from this tree."""
    import types

    source = path.read_text().replace("class WeightedBlend(", "class WeightedBlendBefore(")
    module = types.ModuleType("blend_weighted_before")
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module.WeightedBlendBefore


# 2. token shares -----------------------------------------------------------------------------


def text_data(root: Path, name: str, lengths: list[int]) -> Path:
    folder = root / name
    if (folder / ".nv-meta" / "split.yaml").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for shard, start in enumerate(range(0, len(lengths), 1000)):
        with tarfile.open(folder / f"t-{shard}.tar", "w", format=tarfile.GNU_FORMAT) as tar:
            for i in range(start, min(len(lengths), start + 1000)):
                data = ("x " * lengths[i]).encode()
                info = tarfile.TarInfo(f"{name}{i:06d}.txt")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    el.prepare_dataset(
        folder,
        split_ratio=[("train", 1)],
        sample_type="TextSample",
        field_map={"text": "txt"},
        progress=False,
    )
    return folder


def lognormal(count: int, median_: float, sigma: float, low: int, name: str) -> list[int]:
    values = rng_for(0, "bench_mix", name).lognormal(math.log(median_), sigma, count)
    return [int(min(SEQUENCE, max(low, v))) for v in values]


@dataclass
class Tokens(el.Sample):
    tokens: torch.Tensor | None = None
    parts: list[tuple[int, int]] = field(default_factory=list)  # (leaf, tokens) per member


class PackingEncoder(el.TaskEncoder):
    """One token per word; best fit into 4096; the default sample_cost (len of tokens)."""

    def preencode_sample(self, sample: Any) -> Tokens:
        tokens = torch.ones(sample.text.count(" "), dtype=torch.int32)
        return Tokens.derive_from(
            sample, tokens=tokens, parts=[(sample.__restore_key__.leaf, len(tokens))]
        )

    def select_samples_to_pack(self, samples: list[Any]) -> list[list[Any]]:
        return best_fit(samples, SEQUENCE, length=lambda s: len(s.tokens))

    def pack_selected_samples(self, samples: list[Any]) -> Tokens:
        return Tokens.derive_from(
            samples[0],
            tokens=torch.cat([s.tokens for s in samples]),
            parts=[p for s in samples for p in s.parts],
        )

    def batch(self, samples: list[Any]) -> list[Any]:
        return samples


def token_run(meta: Path, packs: int) -> dict[str, Any]:
    dataset = el.get_train_dataset(
        meta,
        worker_config=el.WorkerConfig(0, 1, 0),
        batch_size=PACK_BATCH,
        shuffle_buffer_size=100,
        max_samples_per_sequence=100,
        packing_buffer_size=200,
        task_encoder=PackingEncoder(),
    )
    loader = el.get_savable_loader(dataset)
    tokens, samples, delivered = [0, 0], [0, 0], 0
    start = time.perf_counter()
    for batch in loader:
        for pack in batch:
            for leaf, n in pack.parts:
                tokens[leaf] += n
                samples[leaf] += 1
            delivered += 1
        if delivered >= packs:
            break
    seconds = time.perf_counter() - start
    mix = loader.mix()
    loader.close()
    return {
        "packs": delivered,
        "token_share": tokens[0] / sum(tokens),
        "sample_share": samples[0] / sum(samples),
        "tokens": tokens,
        "samples": samples,
        "seconds": seconds,
        "reported": None if mix is None else mix["sources"][0]["token_share"],
    }


def write_meta(root: Path, unit: str) -> Path:
    path = root / f"tokens_{unit}.yaml"
    path.write_text(
        "__module__: energon_lite\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        f"    weight_unit: {unit}\n    blend:\n"
        "      - path: ./short\n        weight: 1\n      - path: ./long\n        weight: 1\n"
    )
    return path


# main ---------------------------------------------------------------------------------------


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--draws", type=int, default=100_000)
    parser.add_argument("--packs", type=int, default=10_000)
    parser.add_argument("--data", type=Path, default=Path("/tmp/bench_mix"))
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a blend_weighted.py of another version (git show main:energon_lite/stages/"
        "blend_weighted.py > before.py): measured as 'before' in the same rounds",
    )
    parser.add_argument("--skip-draws", action="store_true")
    parser.add_argument("--skip-tokens", action="store_true")
    args = parser.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)

    if not args.skip_draws:
        datasets = [caption_data(args.data, "web", 20_000), caption_data(args.data, "cur", 20_000)]
        variants: tuple[str, ...] = ("today", "scheduled 9:1+stratified", "scheduled+stratified")
        if args.baseline is not None:
            BASELINE.append(load_baseline(args.baseline))
            variants = ("before", *variants)
        results: dict[str, list[float]] = {v: [] for v in variants}
        print(f"draws/s, load before: {load()}")
        total = args.rounds * args.draws
        timed = {v: Timed(v, datasets, total) for v in variants}
        for r in range(args.rounds):
            got = draws_round(variants, timed, args.draws, r)
            for variant in variants:
                results[variant].append(got[variant])
            print(f"round {r}: " + ", ".join(f"{v} {results[v][-1]:,.0f}" for v in variants))
        rows = [
            [v, fmt_num(median(results[v])), f"{min(results[v]):,.0f}-{max(results[v]):,.0f}"]
            for v in variants
        ]
        print(markdown_table(["blend", "draws per CPU s (median)", "spread (min-max)"], rows))
        base = variants[0]
        for other in variants[1:]:
            share = ratio(median(results[other]), median(results[base]))
            per_round = [b / a for a, b in zip(results[base], results[other])]
            print(
                f"{other} / {base}: {fmt_num(share, 3)} (median of the rounds' ratios "
                f"{fmt_num(median(per_round), 3)}, per round {min(per_round):.3f}-"
                f"{max(per_round):.3f})"
            )
        print(f"load after: {load()}")
        costs = own_cost(variants, 5)
        print(
            "the blend's own CPU per draw (sources that cost nothing, median of 5 rounds): "
            + ", ".join(f"{v} {costs[v]:,.0f} ns" for v in variants)
        )
        reader = 1e9 / (median(results[variants[0]]) or 1.0)
        for other in variants[1:]:
            extra = costs[other] - costs[variants[0]]
            print(
                f"{other} - {variants[0]}: {extra:+,.0f} ns per draw = "
                f"{100 * extra / reader:+.2f}% of the {reader / 1e3:,.1f} us a draw takes "
                "with its Reader"
            )

    if not args.skip_tokens:
        text_data(args.data, "short", lognormal(20_000, 250, 0.6, 16, "short"))
        text_data(args.data, "long", lognormal(6_000, 1500, 0.5, 64, "long"))
        print(f"token shares, load before: {load()}")
        rows = []
        for unit in ("tokens", "samples"):
            run = token_run(write_meta(args.data, unit), args.packs)
            rows.append(
                [
                    f"weight_unit: {unit}",
                    f"{run['packs']:,}",
                    f"{100 * run['token_share']:.2f}%",
                    f"{100 * (1 - run['token_share']):.2f}%",
                    f"{100 * run['sample_share']:.1f}%",
                    "n/a" if run["reported"] is None else f"{100 * run['reported']:.2f}%",
                    f"{run['seconds']:.0f} s",
                ]
            )
        print(
            markdown_table(
                [
                    "blend 50:50",
                    "packed sequences",
                    "short: token share",
                    "long: token share",
                    "short: sample share",
                    "short: loader.mix()",
                    "time",
                ],
                rows,
            )
        )
        print(f"load after: {load()}")


if __name__ == "__main__":
    main()
