"""Robot episodes: energon_lite's pool vs a decode-everything-in-memory pool.

Both sample uniform start frames from the same pool of episodes and build the same
transition (qpos, all cameras' frame t, an action chunk with masks):

* **energon_lite** - ``EpisodePool`` + ``TransitionBuilder``: low-dimensional arrays in
  memory, camera frames read from the HDF5 file and decoded per transition; with
  ``--cache`` fractions also with a decoded-frame cache (``frame_cache_bytes``) of that
  fraction of the decode-all pool's bytes (``cache 25%`` holds at most a quarter of them),
  filled lazily by the draws, and a cache of 100% ``prefilled`` at pool load
  (``TransitionBuilder.prefill``: the decode-all strategy through the cache);
* **decode-all** - the requirement document's loader: every frame of every pool episode
  decoded into numpy arrays when the pool loads, transitions sliced from memory, with the
  same fields (discounted rewards, masks, valid, terminals by the same ``chunk_fields``).

Reported per side: pool load time, transitions/s after loading, epoch transitions/s
(draws / (load + draws): what a run that reloads its pool every epoch gets), warm
transitions/s (a second round of draws from the same pool, cache as the first left it),
pool memory
(numpy bytes held at the end of the epoch; for a cache its ``held_bytes``) and
tracemalloc's peak from one extra traced round. Rounds alternate the loaders; the table
shows medians and the min-max spread of the rates. Usage:
``python benchmarks/bench_episodes.py [--frames 120 --draws 2000 --cache 0.25 1.0 ...]``.
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import h5py
import numpy as np
from PIL import Image

from energon_lite.flavors.episodes import (
    EpisodePool,
    TransitionBuilder,
    compute_norm_stats,
    prepare_episodes,
)
from energon_lite.flavors.episodes.index import load_episode_index
from energon_lite.flavors.episodes.pool import choose_pool
from energon_lite.flavors.episodes.transitions import chunk_fields
from energon_lite.rng import rng_for
from energon_lite.synth.episodes import write_dataset

CAMS = ["cam_high", "cam_left_wrist", "cam_right_wrist"]


def decode_all_pool(index, pool):
    """The baseline: load and decode every frame of every pool episode."""
    episodes = []
    for e in pool.tolist():
        with h5py.File(index.path(e), "r") as f:
            images = []
            for cam in CAMS:
                rows = f[f"observations/images/{cam}"][()]
                images.append(
                    np.stack(
                        [
                            np.asarray(Image.open(io.BytesIO(r.tobytes())).convert("RGB"))
                            for r in rows
                        ]
                    )
                )
            qpos, action = f["observations/qpos"][()], f["action"][()]
            # the sparse success reward, as the document's loader computes it
            reward = np.zeros(len(qpos), np.float32)
            reward[-1] = 1.0 if index.labels[e] else 0.0
            episodes.append((qpos, action, np.stack(images, axis=1), reward, bool(index.labels[e])))
    return episodes


def baseline_transition(episodes, cum, draw, chunk, norm):
    """The document's ``_create_transition_from_preloaded``: the same fields as ours.

    ``images`` is a view of the decoded pool, not a copy: batching copies it, as it copies
    the cached (read-only) frames of energon_lite, so neither side pays a copy here.
    """
    e = int(np.searchsorted(cum, draw, side="right"))
    qpos, action, images, reward, positive = episodes[e]
    t = draw - (int(cum[e]) - len(qpos))
    n = min(chunk, len(qpos) - t)
    actions = np.zeros((chunk, action.shape[1]), np.float32)
    actions[:n] = (action[t : t + n] - norm["action_mean"]) / norm["action_std"]
    fields = chunk_fields(len(qpos), t, chunk, reward, 0.99)
    return {"observations": {"qpos": (qpos[t] - norm["qpos_mean"]) / norm["qpos_std"],
                             "images": images[t], "depth_images": None},
            "actions": actions, **fields, "is_positive": positive,
            "final_reward": float(fields["rewards"][-1])}  # fmt: skip


def run_energon(index, norm, args, round_id, trace=False, cache_bytes=0, prefill=False):
    if trace:
        tracemalloc.start()
    builder = TransitionBuilder(index, CAMS, norm, args.chunk, frame_cache_bytes=cache_bytes)
    stage = EpisodePool(builder, round_id, 0, 1, 0, 1, episodes_per_epoch=args.pool, positive_ratio=0.5,
                        steps_per_epoch=2 * args.draws, batch_size=1)  # fmt: skip
    t0 = time.perf_counter()
    for e in stage.pool(0).tolist():  # what "loading the pool" costs here: low-dim arrays
        builder.reader.low_dim(e)
    if prefill:  # and, prefilled, every frame decoded into the cache (as decode-all does)
        builder.prefill(stage.pool(0).tolist())
    t1 = time.perf_counter()
    for _ in range(args.draws):
        stage.next()
    t2 = time.perf_counter()
    for _ in range(args.draws if builder.reader.frame_cache is not None else 0):
        stage.next()  # the same pool again, cache warm
    warm = args.draws / (time.perf_counter() - t2) if builder.reader.frame_cache else 0.0
    held = sum(a.nbytes for low in builder.reader._low.values() for a in low if a is not None)
    if builder.reader.frame_cache is not None:
        held += builder.reader.frame_cache.held_bytes
    peak = tracemalloc.get_traced_memory()[1] if trace else 0
    tracemalloc.stop()
    builder.reader.close()
    return t1 - t0, args.draws / (t2 - t1), t2 - t0, held, peak, warm


def run_baseline(index, norm, args, round_id, trace=False):
    if trace:
        tracemalloc.start()
    pool = choose_pool(index, round_id, 0, 0, args.pool, 0.5)
    t0 = time.perf_counter()
    episodes = decode_all_pool(index, pool)
    t1 = time.perf_counter()
    cum = np.cumsum([len(ep[0]) for ep in episodes])
    draws = rng_for(round_id, "bench").integers(0, int(cum[-1]), args.draws)
    for d in draws.tolist():
        baseline_transition(episodes, cum, d, args.chunk, norm)
    t2 = time.perf_counter()
    held = sum(a.nbytes for ep in episodes for a in ep[:4])
    peak = tracemalloc.get_traced_memory()[1] if trace else 0
    tracemalloc.stop()
    return t1 - t0, args.draws / (t2 - t1), t2 - t0, held, peak, args.draws / (t2 - t1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--frames", type=int, default=120)
    parser.add_argument("--height", type=int, default=240)
    parser.add_argument("--width", type=int, default=320)
    parser.add_argument("--pool", type=int, default=6)
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--chunk", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cache", type=float, nargs="*", default=[0.25, 1.0],
                        help="frame-cache budgets as fractions of the decoded pool's bytes")  # fmt: skip
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to write episodes (default: a temp dir)"
    )
    args = parser.parse_args()
    folder = args.dir or Path(tempfile.mkdtemp(prefix="bench_episodes_"))
    if not (folder / ".nv-meta" / "episodes.npz").is_file():
        write_dataset(folder, [args.frames] * args.episodes, cameras=tuple(CAMS), images="jpeg",
                      image_size=(args.height, args.width), qpos_dim=14, action_dim=14, texture=True)  # fmt: skip
        prepare_episodes(folder)
    index = load_episode_index(folder)
    norm = compute_norm_stats(index)
    pool_bytes = args.pool * args.frames * len(CAMS) * args.height * args.width * 3
    runners = {"energon_lite": lambda r, t=False: run_energon(index, norm, args, r, t)}
    for fraction in args.cache:
        runners[f"energon_lite, cache {fraction:.0%}"] = (
            lambda r, t=False, b=int(fraction * pool_bytes): run_energon(index, norm, args, r, t, b)
        )
    runners["energon_lite, cache 100%, prefilled"] = lambda r, t=False: run_energon(
        index, norm, args, r, t, pool_bytes, prefill=True
    )
    runners["decode-all"] = lambda r, t=False: run_baseline(index, norm, args, r, t)
    results = {name: [] for name in runners}
    for r in range(args.rounds):  # alternate the loaders so drift hits all of them
        for name, run in runners.items():
            results[name].append(run(r))
    # memory in a separate traced round: tracemalloc slows Python code down
    peaks = {name: run(0, True)[4] for name, run in runners.items()}
    disk = sum(index.path(e).stat().st_size for e in range(len(index))) / len(index)
    print(f"{args.episodes} episodes x {args.frames} frames x {len(CAMS)} JPEG cameras "
          f"{args.height}x{args.width} ({disk / 2**20:.1f} MiB/episode on disk); pool of {args.pool}, "
          f"{args.draws} draws, chunk {args.chunk}, median of {args.rounds} rounds\n")  # fmt: skip
    print("| loader | pool load (s) | transitions/s after load (min-max) | epoch transitions/s "
          "(min-max) | warm transitions/s | vs decode-all (after load / epoch / warm) | "
          "pool memory held (MiB) | tracemalloc peak (MiB) |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    base = results["decode-all"]
    base_rate = statistics.median(row[1] for row in base)
    base_epoch = statistics.median(args.draws / row[2] for row in base)
    for name, rows in results.items():
        load, rate, _, held, _, warm = (statistics.median(col) for col in zip(*rows))
        rates = [row[1] for row in rows]
        epochs = [args.draws / row[2] for row in rows]
        epoch = statistics.median(epochs)
        print(
            f"| {name} | {load:.2f} | {rate:,.0f} ({min(rates):,.0f}-{max(rates):,.0f}) | "
            f"{epoch:,.0f} ({min(epochs):,.0f}-{max(epochs):,.0f}) | "
            f"{f'{warm:,.0f}' if warm else '-'} | {rate / base_rate:.2f}x / {epoch / base_epoch:.2f}x"
            f" / {f'{warm / base_rate:.2f}x' if warm else '-'} | {held / 2**20:.2f} | "
            f"{peaks[name] / 2**20:.1f} |"
        )


if __name__ == "__main__":
    main()
