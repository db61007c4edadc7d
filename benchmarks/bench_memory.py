"""Worker memory against dataset size: 1M vs 10M samples, energon_lite vs megatron-energon.

docs/architecture.md, "Memory": nothing per sample lives in Python objects, so a worker's private
memory must not grow with the number of samples. This measures it.

Data: one real shard of 10,000 small text samples, indexed once, then hard-linked (with its
``.tar.idx``) under 100 or 1,000 shard names: a 1M- and a 10M-sample prepared dataset that
cost no extra disk. Each (library, size) runs in a fresh process: open the training dataset
(1 worker, batch 64, shuffle buffer 100, max_samples_per_sequence 100), take 200 batches,
then read the worker's USS (private memory: what the worker alone holds) and the main
process's USS with psutil. Rounds alternate the order (A/B); medians are reported.

    python benchmarks/bench_memory.py [--rounds 3] [--batches 200]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ab_order, fmt_bytes, markdown_table, median

DATA = Path(__file__).resolve().parent / "data" / "memory"
PER_SHARD = 10_000


def _base_shard(folder: Path) -> Path:
    base = folder / "base.tar"
    if base.exists():
        return base
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(base, "w", format=tarfile.GNU_FORMAT) as tar:
        for i in range(PER_SHARD):
            data = f"sample {i} of a text dataset".encode()
            info = tarfile.TarInfo(f"{i:07d}.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    from energon_lite.shards.tar_index import scan_shard, write_index

    write_index(base, scan_shard(base).offsets)
    return base


def build(num_shards: int) -> Path:
    """A prepared dataset of ``num_shards`` hard links to one 10k-sample shard."""
    root = DATA / f"text_{num_shards * PER_SHARD // 1_000_000}M"
    if (root / ".nv-meta/.info.json").exists():
        return root
    base = _base_shard(DATA)
    (root / "parts").mkdir(parents=True, exist_ok=True)
    names = [f"parts/s-{i:05d}.tar" for i in range(num_shards)]
    for name in names:
        for suffix in ("", ".idx"):
            target = root / (name + suffix)
            if not target.exists():
                os.link(str(base) + suffix, target)
    meta = root / ".nv-meta"
    meta.mkdir(exist_ok=True)
    (meta / "split.yaml").write_text(
        yaml.safe_dump({"split_parts": {"train": names}, "exclude": []})
    )
    (meta / "dataset.yaml").write_text(
        yaml.safe_dump(
            {
                "sample_type": {"__module__": "megatron.energon", "__class__": "TextSample"},
                "field_map": {"text": "txt"},
            }
        )
    )
    info = {"energon_version": "bench", "shard_counts": dict.fromkeys(names, PER_SHARD)}
    (meta / ".info.json").write_text(json.dumps(info))
    return root


CHILD = r"""
import json, sys, time
import psutil
library, path, batches = sys.argv[1], sys.argv[2], int(sys.argv[3])
if library == "energon_lite":
    from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset
else:
    from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset
start = time.perf_counter()
dataset = get_train_dataset(path, worker_config=WorkerConfig(rank=0, world_size=1, num_workers=1),
                            batch_size=64, shuffle_buffer_size=100, max_samples_per_sequence=100)
opened = time.perf_counter() - start
loader = get_savable_loader(dataset)
iterator = iter(loader)
for _ in range(batches):
    next(iterator)
me = psutil.Process()
workers = me.children(recursive=True)
print(json.dumps({
    "open_s": opened,
    "worker_uss": max(w.memory_full_info().uss for w in workers),
    "main_uss": me.memory_full_info().uss,
}))
"""


def measure(library: str, path: Path, batches: int) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, library, str(path), str(batches)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{library} on {path.name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=200)
    args = parser.parse_args()
    sizes = {"1M": build(100), "10M": build(1000)}
    runs = [(lib, size) for lib in ("energon_lite", "energon") for size in sizes]
    results: dict[tuple[str, str], list[dict]] = {run: [] for run in runs}
    for round_index in range(args.rounds):
        for lib, size in ab_order(runs, round_index):
            result = measure(lib, sizes[size], args.batches)
            results[(lib, size)].append(result)
            print(
                f"round {round_index + 1} {lib:12s} {size:>3s}: worker {fmt_bytes(result['worker_uss'])}, "
                f"main {fmt_bytes(result['main_uss'])}, open {result['open_s']:.2f} s",
                flush=True,
            )
    rows = []
    for lib in ("energon_lite", "energon"):
        small = {k: median([r[k] for r in results[(lib, "1M")]]) for k in results[(lib, "1M")][0]}
        big = {k: median([r[k] for r in results[(lib, "10M")]]) for k in results[(lib, "10M")][0]}
        rows.append(
            [
                lib,
                fmt_bytes(small["worker_uss"]),
                fmt_bytes(big["worker_uss"]),
                fmt_bytes(big["worker_uss"] - small["worker_uss"]),
                fmt_bytes(small["main_uss"]),
                fmt_bytes(big["main_uss"]),
                f"{small['open_s']:.2f} s",
                f"{big['open_s']:.2f} s",
            ]
        )
    print()
    print(f"{args.rounds} rounds, medians, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores")
    print(
        markdown_table(
            [
                "loader",
                "worker USS 1M",
                "worker USS 10M",
                "growth",
                "main USS 1M",
                "main USS 10M",
                "open 1M",
                "open 10M",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
