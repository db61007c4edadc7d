"""Sequence packing: fraction of real tokens and throughput, energon_lite against Energon.

Dataset: ``--samples`` (20,000) text samples in tar shards of 1,000, made once under
``benchmarks/data/packing_text_<n>`` (git-ignored). Sample ``i`` is a ``.txt`` of ``L_i``
one-letter words, ``L_i`` drawn by :func:`energon_lite.task_encoder.packing.long_tailed_lengths`
(50-2000 tokens, median 300). Both loaders run the same work per sample and pack:

* encode: split the text into words -> an int32 token tensor (one token per word);
* select: :func:`energon_lite.task_encoder.packing.best_fit` into 4096 tokens over a buffer of
  ``--buffer`` (1000) samples;
* pack: concatenate the members and pad to 4096; batch: stack 8 packs.

energon_lite: ``get_train_dataset(..., packing_buffer_size=1000)`` with a TaskEncoder whose
``preencode_sample`` tokenizes. Energon 7.x: its ``get_train_dataset`` with the same
``packing_buffer_size`` and an equivalent TaskEncoder (``encode_sample`` tokenizes, as
Energon encodes before packing). Both: shuffle buffer 100, max_samples_per_sequence 100,
0 workers (in-process), ``--packs`` packs timed after the first batch (which includes
filling the first buffer). Rounds alternate the order (A/B); medians are reported.

Also printed: the real-token fraction of best-fit and first-fit decreasing on the same
length distribution at buffers 200 and 1000, from the helpers alone (no I/O).

    python benchmarks/bench_packing.py [--samples 20000] [--rounds 3] [--packs 1600]
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
import tarfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from common import ab_order, fmt_num, markdown_table, median, ratio

from energon_lite.rng import rng_for
from energon_lite.task_encoder.packing import best_fit, first_fit_decreasing, long_tailed_lengths

DATA = Path(__file__).resolve().parent / "data"
MAX_LENGTH = 4096
BATCH = 8
SAMPLES_PER_SHARD = 1000
LIBS = ("energon_lite", "energon")


def build_dataset(num_samples: int) -> Path:
    """The prepared text dataset of ``num_samples`` samples, built on first use (atomically)."""
    root = DATA / f"packing_text_{num_samples}"
    if (root / ".nv-meta" / "split.yaml").exists():
        return root
    from energon_lite import prepare_dataset

    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "parts").mkdir(parents=True)
    lengths = long_tailed_lengths(num_samples, rng_for(0, "bench_packing"))
    for shard, start in enumerate(range(0, num_samples, SAMPLES_PER_SHARD)):
        with tarfile.open(
            tmp / "parts" / f"text-{shard}.tar", "w", format=tarfile.GNU_FORMAT
        ) as tar:
            for i in range(start, min(num_samples, start + SAMPLES_PER_SHARD)):
                data = " ".join("abcdefghij"[(i + j) % 10] for j in range(lengths[i])).encode()
                info = tarfile.TarInfo(f"{i:07d}.txt")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    prepare_dataset(
        tmp,
        split_ratio=[("train", 1)],
        sample_type="TextSample",
        field_map={"text": "txt"},
        progress=False,
    )
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    return root


# the shared work --------------------------------------------------------------------------


def tokenize(text: str) -> torch.Tensor:
    return torch.tensor([ord(w[0]) for w in text.split()], dtype=torch.int32)


def select(samples: list[Any]) -> list[list[Any]]:
    return best_fit(samples, MAX_LENGTH, length=lambda s: len(s.tokens))


def pack_tokens(samples: list[Any]) -> torch.Tensor:
    tokens = torch.cat([s.tokens for s in samples])
    return torch.nn.functional.pad(tokens, (0, MAX_LENGTH - len(tokens)))


def collate(packs: list[Any]) -> dict[str, Any]:
    return {
        "tokens": torch.stack([p.tokens for p in packs]),
        "real": sum(p.real for p in packs),
        "samples": sum(p.count for p in packs),
    }


def make_loader(lib: str, root: Path, buffer: int) -> Any:
    common = dict(batch_size=BATCH, shuffle_buffer_size=100, max_samples_per_sequence=100)
    if lib == "energon_lite":
        import energon_lite as el

        @dataclass
        class Tokens(el.Sample):
            tokens: torch.Tensor | None = None
            real: int = 0
            count: int = 1

        class LiteEncoder(el.TaskEncoder):
            def preencode_sample(self, sample: Any) -> Tokens:
                tokens = tokenize(sample.text)
                return Tokens.derive_from(sample, tokens=tokens, real=len(tokens))

            def select_samples_to_pack(self, samples: list[Any]) -> list[list[Any]]:
                return select(samples)

            def pack_selected_samples(self, samples: list[Any]) -> Tokens:
                real = sum(s.real for s in samples)
                return Tokens.derive_from(
                    samples[0], tokens=pack_tokens(samples), real=real, count=len(samples)
                )

            def batch(self, samples: list[Any]) -> dict[str, Any]:
                return collate(samples)

        ds = el.get_train_dataset(
            root,
            worker_config=el.WorkerConfig(0, 1, 0),
            packing_buffer_size=buffer,
            task_encoder=LiteEncoder(),
            **common,
        )
        return el.get_savable_loader(ds)
    import megatron.energon as me

    @dataclass
    class EnergonTokens(me.Sample):
        tokens: torch.Tensor
        real: int = 0
        count: int = 1

    class EnergonEncoder(me.TaskEncoder):
        @me.stateless
        def encode_sample(self, sample: Any) -> EnergonTokens:
            tokens = tokenize(sample.text)
            return EnergonTokens.derive_from(sample, tokens=tokens, real=len(tokens))

        def select_samples_to_pack(self, samples: list[Any]) -> list[list[Any]]:
            return select(samples)

        @me.stateless
        def pack_selected_samples(self, samples: list[Any]) -> EnergonTokens:
            real = sum(s.real for s in samples)
            return EnergonTokens.derive_from(
                samples[0], tokens=pack_tokens(samples), real=real, count=len(samples)
            )

        @me.stateless
        def batch(self, samples: list[Any]) -> dict[str, Any]:
            return collate(samples)

    ds = me.get_train_dataset(
        root,
        split_part="train",
        worker_config=me.WorkerConfig(rank=0, world_size=1, num_workers=0),
        packing_buffer_size=buffer,
        task_encoder=EnergonEncoder(),
        **common,
    )
    return me.get_savable_loader(ds)


def measure(lib: str, root: Path, buffer: int, packs: int) -> dict[str, float]:
    loader = make_loader(lib, root, buffer)
    iterator = iter(loader)
    next(iterator)  # the first batch fills the first packing buffer
    real = samples = 0
    batches = packs // BATCH
    start = time.perf_counter()
    for _ in range(batches):
        batch = next(iterator)
        if batch["tokens"].shape != (BATCH, MAX_LENGTH):
            raise RuntimeError(f"{lib}: unexpected batch shape {tuple(batch['tokens'].shape)}")
        real += batch["real"]
        samples += batch["samples"]
    seconds = time.perf_counter() - start
    return {
        "packs_per_s": batches * BATCH / seconds,
        "samples_per_s": samples / seconds,
        "real_fraction": real / (batches * BATCH * MAX_LENGTH),
    }


def helper_efficiency(num_samples: int) -> str:
    """Real-token fraction of the selection helpers alone, per buffer size."""
    lengths = long_tailed_lengths(num_samples, rng_for(0, "bench_packing"))
    rows = []
    for name, packer in (("best_fit", best_fit), ("first_fit_decreasing", first_fit_decreasing)):
        for buffer in (200, 1000):
            packs = real = 0
            start = time.perf_counter()
            for i in range(0, len(lengths) - buffer + 1, buffer):
                groups = packer(lengths[i : i + buffer], MAX_LENGTH, length=int)
                packs += len(groups)
                real += sum(lengths[i : i + buffer])
            ms = (time.perf_counter() - start) * 1000 / (len(lengths) // buffer)
            rows.append([name, buffer, f"{real / (packs * MAX_LENGTH):.1%}", f"{ms:.2f}"])
    return markdown_table(["selection", "buffer", "real tokens", "ms per buffer"], rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3, help="A/B rounds (medians reported)")
    parser.add_argument("--buffer", type=int, default=1000, help="packing_buffer_size")
    parser.add_argument("--packs", type=int, default=1600, help="packs timed per run")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*pin_memory.*")
    root = build_dataset(args.samples)
    results: dict[str, list[dict[str, float]]] = {lib: [] for lib in LIBS}
    for r in range(args.rounds):
        for lib in ab_order(LIBS, r):
            result = measure(lib, root, args.buffer, args.packs)
            results[lib].append(result)
            print(
                f"round {r + 1}/{args.rounds} {lib:12s} {result['samples_per_s']:7.0f} samples/s "
                f"{result['packs_per_s']:6.0f} packs/s {result['real_fraction']:.2%} real",
                file=sys.stderr,
                flush=True,
            )

    def med(lib: str, key: str) -> float | None:
        return median([r[key] for r in results[lib]])

    rows = [
        [
            lib,
            fmt_num(med(lib, "samples_per_s")),
            fmt_num(med(lib, "packs_per_s")),
            fmt_num(100 * (med(lib, "real_fraction") or 0), 1, "%"),
        ]
        for lib in LIBS
    ]
    speedup = median(
        [ratio(a["samples_per_s"], b["samples_per_s"]) for a, b in zip(*results.values())]
    )
    real = med("energon_lite", "real_fraction") or 0.0
    print(
        f"Packing, best_fit into {MAX_LENGTH} tokens, buffer {args.buffer}, {args.samples:,} "
        f"samples of 50-2000 tokens, 0 workers, batch {BATCH} packs, median of {args.rounds} "
        "A/B rounds\n"
    )
    print(markdown_table(["loader", "source samples/s", "packs/s", "real tokens"], rows))
    print(
        f"\nenergon_lite / Energon source samples/s (median of per-round ratios): "
        f"{fmt_num(speedup, 2, 'x')}"
    )
    print(
        f"\nTargets: real tokens >= 98%: {real:.1%} {'met' if real >= 0.98 else 'MISSED'}; "
        f">= 2x Energon: {fmt_num(speedup, 2, 'x')} "
        f"{'met' if (speedup or 0) >= 2 else 'MISSED'}\n"
    )
    print("Selection helpers alone (same lengths, no I/O):\n")
    print(helper_efficiency(args.samples))


if __name__ == "__main__":
    main()
