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
  (``SavableLoader``, its own pools per epoch) with the same shared pool;
* ``QCSimpleDatasetV3, shared pool, uint8 out (normalise on the device)`` - in the float32
  group: the uint8 frames of the shared pool, to be divided by 255 on the GPU (what
  robot_episodes.md advises when memory matters); ``create_qc_dataloader_v3, shared pool,
  float32 out``: the resumable loader with ``normalize_images=True`` (its collate converts
  the uint8 frames while stacking the batch).

Every run (loader x round) is a **fresh process** (this script with ``--one``): the tree
measured holds that loader only. (Run in one process, the decode-everything loader's
pool - 158 MiB of numpy arrays in the main process - stayed alive while the energon_lite
loaders ran after it and was counted in their PSS; smaps showed it there.)

Per loader and round: epoch time = refresh (pool load) + all batches; transitions/s =
draws / epoch time; **pool memory** = the bytes holding the decoded pool at the end
(numpy ``nbytes``; for the shared pool the bytes the ``/dev/shm`` files occupy,
``st_blocks``). Memory is sampled at 8 points through the epoch from
``/proc/PID/smaps`` of the main process and its workers (``smaps.py``: PSS per kind of
mapping - heap, decoded pool, pool file, torch shared-memory batches, libraries -
shared pages counted once in total; the pool file counted by its allocated bytes, which
also covers pages no process maps any more). **Held by the loader** = everything but the
batches in flight, at the sample where it is largest; **batches in flight** (torch
shared-memory segments alive in any of the processes, found through mappings and open
descriptors and each counted once at full size: a queued batch is in no PSS until the
main process reads it; up to ``prefetch_factor x workers`` batches plus those being
built, the same bytes per batch for every loader of a group, how many at a sample
depending on timing) are reported apart, and the whole PSS and
USS maxima beside them. Rounds alternate the loaders (``common.ab_order``); medians
with the min-max. Usage: ``python benchmarks/bench_episodes_workers.py [--workers 2
--draws-per-frame 50 --rounds 3 --dtypes uint8 float32]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
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
from smaps import KINDS, process_breakdown, torch_shm_bytes

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


def pool_ranges(ds: Any) -> list[tuple[int, int]]:
    """Address ranges of the decode-everything pool's frame arrays (inherited by forked workers)."""
    if not isinstance(ds, DecodeAllV3):
        return []
    return [(a.ctypes.data, a.ctypes.data + a.nbytes) for ep in ds.episodes for a in (ep[2],)]


def sample(ranges: list[tuple[int, int]], shared_dir: Path | None) -> dict[str, Any]:
    """The tree's memory now: PSS by kind of mapping, for the main process and the workers.

    ``pool file`` is replaced by the bytes the pool files occupy in /dev/shm (``st_blocks``):
    tmpfs pages are RAM whether a process maps them or not (a file no process maps any more
    has no PSS at all), and counting the file once covers every mapping of it.
    """
    me = psutil.Process()
    procs = [me, *me.children(recursive=True)]
    roles: dict[str, dict[str, int]] = {}
    uss = 0
    for proc in procs:
        role = "main" if proc.pid == me.pid else "workers"
        got = process_breakdown(proc.pid, ranges)
        roles[role] = {k: roles.get(role, {}).get(k, 0) + v for k, v in got.items()}
        with contextlib.suppress(psutil.Error):
            uss += proc.memory_full_info().uss
    files = 0 if shared_dir is None else shm_bytes(shared_dir)
    total = {k: sum(r[k] for r in roles.values()) for k in KINDS}
    pss = sum(total.values())
    total["pool file"] = files
    # batches queued in torch's shared memory are in no PSS until the main process reads them
    total["batches (torch shm)"] = torch_shm_bytes(p.pid for p in procs)
    return {"roles": roles, "kinds": total, "pss": pss, "uss": uss,
            "held": sum(v for k, v in total.items() if k != "batches (torch shm)"),
            "batches": total["batches (torch shm)"]}  # fmt: skip


def drain(batches: Any, steps: int, ranges: list, shared_dir: Path | None) -> dict[str, Any]:
    """Take ``steps`` batches, sampling the tree's memory at 8 points through the epoch.

    Returned: the sample holding the most memory without the batches in flight (what the
    loader holds), and the largest batches-in-flight and whole-PSS figures seen.
    """
    points = {min(steps - 1, round(steps * k / 8)) for k in range(1, 9)}
    samples = []
    it = iter(batches)
    for step in range(steps):
        batch = next(it)  # held until the next one, as a training loop holds it
        if step in points:
            samples.append(sample(ranges, shared_dir))
        del batch
    del it
    worst = max(samples, key=lambda s: s["held"])
    return {**worst, "batches": max(s["batches"] for s in samples),
            "pss": max(s["pss"] for s in samples), "uss": max(s["uss"] for s in samples)}  # fmt: skip


def run_map(ds: Any, seed: int, args: argparse.Namespace, steps: int) -> dict:
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    ds.refresh_epoch(seed)
    t1 = time.perf_counter()
    sampler = RandomSampler(ds, replacement=True, num_samples=steps * args.batch)
    loader = DataLoader(ds, batch_size=args.batch, sampler=sampler, num_workers=args.workers,
                        drop_last=True)  # fmt: skip
    shared = None if isinstance(ds, DecodeAllV3) else ds.builder.shared_dir.path
    mem = drain(loader, steps, pool_ranges(ds), shared)
    t2 = time.perf_counter()
    held = ds.pool_bytes() if shared is None else shm_bytes(shared)
    return {"load": t1 - t0, "epoch": t2 - t0, "pool": held, **mem}


def shm_bytes(shared_dir: Path) -> int:
    """Bytes the shared pool files occupy in /dev/shm (allocated pages)."""
    return sum(f.stat().st_blocks * 512 for f in shared_dir.glob("pool_*.bin") if f.exists())


def run_resumable(
    folder: Path, norm: dict, seed: int, args: argparse.Namespace, steps: int, floats: bool
) -> dict:
    t0 = time.perf_counter()
    ds, loader = create_qc_dataloader_v3(
        folder, CAMS, norm, args.chunk, episodes_per_epoch=args.pool, batch_size=args.batch,
        epoch_seed=seed, positive_ratio=0.5, steps_per_epoch=steps, num_workers=args.workers,
        pin_memory=False, shared_pool=True, normalize_images=floats,
    )  # fmt: skip
    shared = ds.pipeline.builder.shared_dir.path
    mem = drain(loader, steps, [], shared)
    t2 = time.perf_counter()
    held = shm_bytes(shared)
    loader.close()
    return {"load": 0.0, "epoch": t2 - t0, "pool": held, **mem}


UINT8_GROUP = (
    "decode-all uint8",
    "QCSimpleDatasetV3, shared pool",
    "create_qc_dataloader_v3, shared pool",
)
FLOAT32_GROUP = (  # compared with decode-all float32
    "decode-all float32",
    "QCSimpleDatasetV3, shared pool, float32 out",
    "QCSimpleDatasetV3, shared pool, uint8 out (normalise on the device)",
    "create_qc_dataloader_v3, shared pool, float32 out",
)
LOADERS = UINT8_GROUP + FLOAT32_GROUP


def run_one(name: str, r: int, folder: Path, args: argparse.Namespace, steps: int) -> dict:
    """One loader, one round, in this (fresh) process."""
    index = load_episode_index(folder)
    norm = compute_norm_stats(index)
    if name.startswith("decode-all"):
        ds = DecodeAllV3(index, norm, args.chunk, args.pool, name.endswith("float32"))
        return run_map(ds, r, args, steps)
    if name.startswith("create_qc"):
        return run_resumable(folder, norm, r, args, steps, name.endswith("float32 out"))
    ours = QCSimpleDatasetV3(folder, CAMS, norm, args.chunk, episodes_per_epoch=args.pool,
                             positive_ratio=0.5, shared_pool=True,
                             normalize_images=name.endswith("float32 out"))  # fmt: skip
    return run_map(ours, r, args, steps)


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
    parser.add_argument("--one", choices=LOADERS, help=argparse.SUPPRESS)  # a child's run
    parser.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    folder = args.dir or Path(tempfile.mkdtemp(prefix="bench_episodes_"))
    pool_frames = args.pool * args.frames
    steps = max(1, round(pool_frames * args.draws_per_frame / args.batch))
    if args.one:
        print(json.dumps(run_one(args.one, args.round, folder, args, steps)))
        return
    if not (folder / ".nv-meta" / "episodes.npz").is_file():
        write_dataset(folder, [args.frames] * args.episodes, cameras=tuple(CAMS), images="jpeg",
                      image_size=(args.height, args.width), qpos_dim=14, action_dim=14, texture=True)  # fmt: skip
        prepare_episodes(folder)
    names = [*(UINT8_GROUP if "uint8" in args.dtypes else ()),
             *(FLOAT32_GROUP if "float32" in args.dtypes else ())]  # fmt: skip
    results: dict[str, list[dict]] = {name: [] for name in names}
    loads = []
    for r in range(args.rounds):
        for name in ab_order(names, r):
            # a fresh process per run: the tree measured holds this loader only (one process
            # running every loader kept decode-all's pool in the main process during ours)
            cmd = [sys.executable, __file__, *sys.argv[1:], "--dir", str(folder), "--one", name,
                   "--round", str(r)]  # fmt: skip
            out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
            row = json.loads(out.strip().splitlines()[-1])
            results[name].append(row)
            loads.append(os.getloadavg()[0])
            print(f"round {r} {name}: {steps * args.batch / row['epoch']:,.0f}/s, held "
                  f"{row['held'] / 2**20:,.0f} MiB, batches {row['batches'] / 2**20:,.0f} MiB",
                  file=sys.stderr)  # fmt: skip
    print(f"{args.episodes} episodes x {args.frames} frames x {len(CAMS)} JPEG cameras "
          f"{args.height}x{args.width}; pool of {args.pool} ({pool_frames} frames); {args.workers} "
          f"workers, batch {args.batch}, {steps} steps = {steps * args.batch:,} draws "
          f"({steps * args.batch / pool_frames:.0f} per pool frame), chunk {args.chunk}; median of "
          f"{args.rounds} alternated rounds; load average {min(loads):.1f}-{max(loads):.1f}\n")  # fmt: skip
    print_tables(results, steps * args.batch)


def print_tables(results: dict[str, list[dict]], draws: int) -> None:
    mib = 2**20
    rows = []
    for name, runs in results.items():
        ref = "decode-all float32" if name in FLOAT32_GROUP else "decode-all uint8"
        ref_runs = results.get(ref, runs)
        rates = [draws / run["epoch"] for run in runs]
        ref_rate = median([draws / run["epoch"] for run in ref_runs]) or 1.0
        ref_pool = median([run["pool"] for run in ref_runs]) or 1.0
        ref_held = median([run["held"] for run in ref_runs]) or 1.0
        pool = median([run["pool"] for run in runs]) or 0.0
        held = median([run["held"] for run in runs]) or 0.0
        rows.append([
            name, f"{median([run['load'] for run in runs]):.2f}",
            f"{median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f})",
            f"{median(rates) / ref_rate:.2f}x", f"{pool / mib:,.1f}", f"{pool / ref_pool:.0%}",
            f"{held / mib:,.0f} ({min(r['held'] for r in runs) / mib:,.0f}-"
            f"{max(r['held'] for r in runs) / mib:,.0f})", f"{held / ref_held:.0%}",
            f"{median([run['batches'] for run in runs]) / mib:,.0f}",
            f"{median([run['pss'] for run in runs]) / mib:,.0f}",
            f"{median([run['uss'] for run in runs]) / mib:,.0f}",
        ])  # fmt: skip
    print(markdown_table(["loader", "pool load (s)", "transitions/s per epoch (min-max)",
                          "vs decode-all (same dtype)", "pool memory (MiB)", "vs decode-all",
                          "held by the loader, all processes (MiB, min-max)", "vs decode-all",
                          "batches in flight, max (MiB)", "PSS all processes, max (MiB)",
                          "USS all processes, max (MiB)"], rows))  # fmt: skip
    print(
        "\nWhere the memory is (MiB, median over rounds of the sample holding the most; "
        "main process / workers; pool file = its allocated bytes and batches = torch's "
        "shared-memory segments alive, each counted once):\n"
    )
    rows = []
    for name, runs in results.items():
        cells = []
        for kind in KINDS:
            if kind in ("pool file", "batches (torch shm)"):  # counted once, not per process
                cells.append(f"{median([r['kinds'][kind] for r in runs]) / mib:,.0f}")
                continue
            m = median([r["roles"]["main"][kind] for r in runs]) or 0.0
            w = median([r["roles"].get("workers", {}).get(kind, 0) for r in runs]) or 0.0
            cells.append(f"{m / mib:,.0f} / {w / mib:,.0f}")
        rows.append([name, *cells, f"{median([r['held'] for r in runs]) / mib:,.0f}"])
    print(markdown_table(["loader", *KINDS, "total without batches"], rows))


if __name__ == "__main__":
    main()
