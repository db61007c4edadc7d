"""Robot episodes through DataLoader workers: the shared decoded pool vs decode-everything.

The requirement document's setting: a map-style dataset in a ``DataLoader`` with worker
processes, batches of 128, ``steps_per_epoch`` batches per epoch over a pool of episodes
(its typical run: 5,000 steps x 128 draws over 32 x 400 frames = 50 draws per pool frame;
default here: 50). Every loader here draws uniformly over its pool (the DataLoader's
indices are ignored, as the document's ``__getitem__`` ignores them; a
``RandomSampler(replacement=True)`` supplies ``steps x 128`` of them). Loaders:

* ``decode-all uint8`` - the document's loader, its pool decoded into uint8 arrays in the
  main process when the epoch is refreshed; the workers are forked afterwards and read the
  arrays through copy-on-write pages (held once: the most memory-frugal form of it);
* ``decode-all float32`` - the same, with the frames normalised to float32 in [0, 1] at
  load: the form the document's memory formula describes (11 MB per frame of three
  480x640 cameras = 3 x 480 x 640 x 3 x 4 bytes);
* ``QCSimpleDatasetV3, shared pool`` - energon_lite's map-style dataset with
  ``shared_pool=True``: one decoded uint8 copy of the pool in ``/dev/shm``, filled by the
  workers' draws (each frame decoded once, by whichever worker draws it first); with
  ``normalize_images=True`` it hands out the same float32 frames as ``decode-all float32``
  from the uint8 pool;
* ``create_qc_dataloader_v3, shared pool`` - energon_lite's exactly resumable loader
  (``SavableLoader``, its own pools per epoch) with the same shared pool.

Per loader and round: epoch time = refresh (pool load) + all batches; transitions/s =
draws / epoch time; **pool memory** = the bytes holding the decoded pool (numpy ``nbytes``;
for the shared pool the bytes the ``/dev/shm`` file really occupies, ``st_blocks``);
**PSS of all processes** = proportional set size summed over the main process and its
workers at the end of the epoch (shared pages counted once in total: COW pool pages and
the shared file alike), which also holds torch and the batches in flight. Rounds alternate
the loaders (``common.ab_order``); medians with the min-max. Usage:
``python benchmarks/bench_episodes_workers.py [--workers 2 --draws-per-frame 50 --rounds 3
--dtypes uint8 float32]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_episodes import CAMS, baseline_transition, decode_all_pool
from common import ab_order, markdown_table, median

from energon_lite.flavors.episodes import (
    QCSimpleDatasetV3,
    compute_norm_stats,
    create_qc_dataloader_v3,
    prepare_episodes,
)
from energon_lite.flavors.episodes.index import load_episode_index
from energon_lite.flavors.episodes.pool import choose_pool
from energon_lite.synth.episodes import write_dataset


class DecodeAllV3(Dataset):
    """The document's QCSimpleDatasetV3 with its pool decoded at load (the baseline)."""

    def __init__(self, index: Any, norm: dict, chunk: int, pool: int, float_images: bool) -> None:
        self.index, self.norm, self.chunk, self.pool_size = index, norm, chunk, pool
        self.float_images = float_images
        self.episodes: list = []

    def refresh_epoch(self, seed: int) -> None:
        self.episodes = []  # the old pool goes first, as in the document
        pool = choose_pool(self.index, 0, seed, 0, self.pool_size, 0.5)
        episodes = decode_all_pool(self.index, pool)
        if self.float_images:
            episodes = [(q, a, im.astype(np.float32) / 255.0, r, p) for q, a, im, r, p in episodes]
        self.episodes = episodes
        self.cum = np.cumsum([len(ep[0]) for ep in episodes])

    def pool_bytes(self) -> int:
        return sum(ep[2].nbytes + ep[0].nbytes + ep[1].nbytes for ep in self.episodes)

    def __len__(self) -> int:
        return int(self.cum[-1])

    def __getitem__(self, idx: int) -> dict:
        draw = int(torch.randint(0, int(self.cum[-1]), (1,)).item())
        item = baseline_transition(self.episodes, self.cum, draw, self.chunk, self.norm)
        del item["observations"]["depth_images"]  # None does not collate (ours drops it too)
        return item


def tree_memory() -> tuple[int, int]:
    """(PSS, USS) summed over this process and its descendants."""
    pss = uss = 0
    me = psutil.Process()
    for p in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            info = p.memory_full_info()
            pss, uss = pss + info.pss, uss + info.uss
    return pss, uss


def drain(batches: Any, steps: int) -> tuple[int, int]:
    """Take ``steps`` batches; the tree's memory near the middle and the end (max of both)."""
    pss = uss = 0
    it = iter(batches)
    for step in range(steps):
        next(it)
        if step in (steps // 2, steps - 1):
            p, u = tree_memory()
            pss, uss = max(pss, p), max(uss, u)
    del it
    return pss, uss


def run_map(ds: Any, seed: int, args: argparse.Namespace, steps: int) -> dict:
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    ds.refresh_epoch(seed)
    t1 = time.perf_counter()
    sampler = RandomSampler(ds, replacement=True, num_samples=steps * args.batch)
    loader = DataLoader(ds, batch_size=args.batch, sampler=sampler, num_workers=args.workers,
                        drop_last=True)  # fmt: skip
    pss, uss = drain(loader, steps)
    t2 = time.perf_counter()
    held = ds.pool_bytes() if isinstance(ds, DecodeAllV3) else shm_bytes(ds.builder)
    return {"load": t1 - t0, "epoch": t2 - t0, "pool": held, "pss": pss, "uss": uss}


def shm_bytes(builder: Any) -> int:
    """Bytes the builder's shared pool files occupy in /dev/shm (allocated pages)."""
    files = builder.shared_dir.path.glob("pool_*.bin")
    return sum(f.stat().st_blocks * 512 for f in files)


def run_resumable(
    folder: Path, norm: dict, seed: int, args: argparse.Namespace, steps: int
) -> dict:
    t0 = time.perf_counter()
    ds, loader = create_qc_dataloader_v3(
        folder, CAMS, norm, args.chunk, episodes_per_epoch=args.pool, batch_size=args.batch,
        epoch_seed=seed, positive_ratio=0.5, steps_per_epoch=steps, num_workers=args.workers,
        pin_memory=False, shared_pool=True,
    )  # fmt: skip
    pss, uss = drain(loader, steps)
    t2 = time.perf_counter()
    held = shm_bytes(ds.pipeline.builder)
    loader.close()
    return {"load": 0.0, "epoch": t2 - t0, "pool": held, "pss": pss, "uss": uss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--frames", type=int, default=120)
    parser.add_argument("--height", type=int, default=240)
    parser.add_argument("--width", type=int, default=320)
    parser.add_argument("--pool", type=int, default=6)
    parser.add_argument("--chunk", type=int, default=50)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--draws-per-frame", type=float, default=50.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtypes", nargs="+", default=["uint8"], choices=["uint8", "float32"],
                        help="uint8: the uint8 loaders; float32: the float32 pair")  # fmt: skip
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    folder = args.dir or Path(tempfile.mkdtemp(prefix="bench_episodes_"))
    if not (folder / ".nv-meta" / "episodes.npz").is_file():
        write_dataset(folder, [args.frames] * args.episodes, cameras=tuple(CAMS), images="jpeg",
                      image_size=(args.height, args.width), qpos_dim=14, action_dim=14, texture=True)  # fmt: skip
        prepare_episodes(folder)
    index = load_episode_index(folder)
    norm = compute_norm_stats(index)
    pool_frames = args.pool * args.frames
    steps = max(1, round(pool_frames * args.draws_per_frame / args.batch))

    def ours(normalize: bool) -> QCSimpleDatasetV3:
        return QCSimpleDatasetV3(folder, CAMS, norm, args.chunk, episodes_per_epoch=args.pool,
                                 positive_ratio=0.5, shared_pool=True, normalize_images=normalize)  # fmt: skip

    loaders: dict[str, Any] = {}
    if "uint8" in args.dtypes:
        loaders["decode-all uint8"] = DecodeAllV3(index, norm, args.chunk, args.pool, False)
        loaders["QCSimpleDatasetV3, shared pool"] = ours(False)
        loaders["create_qc_dataloader_v3, shared pool"] = None
    if "float32" in args.dtypes:
        loaders["decode-all float32"] = DecodeAllV3(index, norm, args.chunk, args.pool, True)
        loaders["QCSimpleDatasetV3, shared pool, float32 out"] = ours(True)
    results: dict[str, list[dict]] = {name: [] for name in loaders}
    loads = []
    for r in range(args.rounds):
        for name in ab_order(list(loaders), r):
            ds = loaders[name]
            row = (
                run_map(ds, r, args, steps)
                if ds is not None
                else run_resumable(folder, norm, r, args, steps)
            )
            results[name].append(row)
            loads.append(os.getloadavg()[0])
            print(f"round {r} {name}: {steps * args.batch / row['epoch']:,.0f}/s", file=sys.stderr)
    print(f"{args.episodes} episodes x {args.frames} frames x {len(CAMS)} JPEG cameras "
          f"{args.height}x{args.width}; pool of {args.pool} ({pool_frames} frames); {args.workers} "
          f"workers, batch {args.batch}, {steps} steps = {steps * args.batch:,} draws "
          f"({steps * args.batch / pool_frames:.0f} per pool frame), chunk {args.chunk}; median of "
          f"{args.rounds} alternated rounds; load average {min(loads):.1f}-{max(loads):.1f}\n")  # fmt: skip
    draws = steps * args.batch
    base = {False: "decode-all uint8", True: "decode-all float32"}
    rows = []
    for name, runs in results.items():
        rates = [draws / run["epoch"] for run in runs]
        ref = base[name.endswith("float32") or name.endswith("float32 out")]
        ref_rate = median([draws / run["epoch"] for run in results[ref]]) or 1.0
        ref_pool = median([run["pool"] for run in results[ref]]) or 1.0
        pool = median([run["pool"] for run in runs]) or 0.0
        rows.append([
            name, f"{median([run['load'] for run in runs]):.2f}",
            f"{median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f})",
            f"{median(rates) / ref_rate:.2f}x", f"{pool / 2**20:,.1f}", f"{pool / ref_pool:.0%}",
            f"{median([run['pss'] for run in runs]) / 2**20:,.0f}",
            f"{median([run['uss'] for run in runs]) / 2**20:,.0f}",
        ])  # fmt: skip
    print(markdown_table(["loader", "pool load (s)", "transitions/s per epoch (min-max)",
                          f"vs {'decode-all'} (same dtype)", "pool memory (MiB)", "vs decode-all",
                          "PSS all processes (MiB)", "USS all processes (MiB)"], rows))  # fmt: skip


if __name__ == "__main__":
    main()
