"""Time to the first batch from the interpreter's start, split into phases (issue 42).

``bench_peers.py`` times each loader's first batch from the child's interpreter start
("from interpreter start"). This script runs the same children (``bench_peers.NewPeer``:
the same imports, the same loader, the same W1 data), stopping at the first batch, and
splits that time where it is spent in the main process:

* ``start``: the interpreter, the benchmark's own modules and torch (the same for every way);
* ``imports``: what the way imports before it builds its loader (``Peer.import_modules``);
* ``loader``: building the loader (energon_lite: ``get_train_dataset`` + ``get_savable_loader``;
  torch: ``PlainTarDataset`` + ``DataLoader``);
* ``iter``: ``iter(loader)`` (at 2 workers the workers are forked here);
* ``first batch``: ``next()`` until the first batch is in the main process (at 0 workers the
  chain's plan, the reads and the 32 decodes run here; at 2 workers the main process waits).

Five views:

* modules: ``sys.modules`` after each phase (ours and third-party), deterministic;
* ``--instructions``: the main process's instructions per phase under callgrind, from its
  first instruction (``callgrind.phases(from_start=True)``), independent of the machine's
  load; the workers are not counted (their chain is the ``first batch`` phase at 0 workers);
* wall-clock seconds per phase from the interpreter's start, median of ``--rounds`` rounds
  with the ways interleaved (noisy on a shared machine);
* full garbage collections per phase (``gc.get_stats``, the count is deterministic for one
  way) and the seconds spent in them (a ``gc.callbacks`` hook): a full collection walks every
  object torch left, so one more of them costs more than many small modules;
* ``--importtime N``: the ``N`` slowest of our modules by ``python -X importtime`` self time,
  median over the rounds (the order of size only: the self time of a module includes any
  garbage collection that happens to run while it executes).

    python benchmarks/bench_first_batch.py [--workers 0,2] [--rounds 5] [--instructions]
        [--importtime 15]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import bench_peers
import callgrind
from bench_pipeline import build_dataset
from common import STARTED_AT, ab_order, cache_bytecode, fmt_num, markdown_table, median

WAYS = ("energon_lite", "torch")
PHASES = ("start", "imports", "loader", "iter", "first batch")
OURS = "energon_lite"


# the child ---------------------------------------------------------------------------------


def child(lib: str, root: Path, workers: int) -> dict[str, Any]:
    """``bench_peers.measure`` up to the first batch, with a mark after each phase: seconds
    since the interpreter's start and the modules loaded then."""
    full_gc = _FullCollections()
    import torch

    marks: list[tuple[float, list[str], int, float]] = []

    def mark() -> None:
        callgrind.mark()
        marks.append((time.time(), sorted(sys.modules), *full_gc.so_far()))

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    mark()
    peer = bench_peers.NewPeer(lib, root, workers)
    peer.import_modules()
    mark()
    loader = peer.loader()
    mark()
    iterator = iter(loader)
    mark()
    first = next(iterator)
    mark()
    if peer.size(first) != bench_peers.bp.BATCH_SIZE:
        raise RuntimeError(f"{lib}: a first batch of {peer.size(first)}")
    started = float(os.environ.get(STARTED_AT, marks[0][0]))
    seconds, before = [], started
    for at, *_ in marks:
        seconds.append(at - before)
        before = at
    counts, gc_seconds = [m[2] for m in marks], [m[3] for m in marks]
    return {
        "seconds": seconds,
        "modules": [m[1] for m in marks],
        "full_gc": [b - a for a, b in zip([0, *counts], counts)],
        "full_gc_seconds": [b - a for a, b in zip([0.0, *gc_seconds], gc_seconds)],
    }


class _FullCollections:
    """The full (generation 2) garbage collections of this process so far, and the seconds
    spent in those seen since this was made (the first phase's count includes any before)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._began = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._began

    def so_far(self) -> tuple[int, float]:
        return gc.get_stats()[2]["collections"], self.seconds


# the parent --------------------------------------------------------------------------------


def run(lib: str, root: Path, workers: int, env: dict[str, str], *flags: str) -> Any:
    """One child; its result and its stderr."""
    cmd = [sys.executable, *flags, __file__, "--child", lib, "--workers", str(workers)]
    cmd += ["--data", str(root)]
    done = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**env, STARTED_AT: repr(time.time())},
    )
    if done.returncode != 0:
        raise RuntimeError(f"{lib} workers={workers} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def importtime_self(stderr: str) -> dict[str, int]:
    """Self microseconds per module from ``python -X importtime``'s lines."""
    found: dict[str, int] = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, _, name = line.split(":", 1)[1].split("|")
        found.setdefault(name.strip(), int(own))
    return found


def module_rows(modules: dict[tuple[str, int], list[list[str]]]) -> list[list[Any]]:
    """Modules newly loaded per phase: ours and third-party, and the third-party packages a
    way loads that the torch way does not."""
    rows = []
    for (lib, workers), per_phase in modules.items():
        seen: set[str] = set()
        torch_all = set(modules.get(("torch", workers), [[]])[-1])
        for phase, names in zip(PHASES, per_phase):
            new = set(names) - seen
            seen |= new
            ours = sum(1 for n in new if n.split(".")[0] == OURS)
            extra = sorted({n.split(".")[0] for n in new - torch_all if n.split(".")[0] != OURS})
            rows.append([workers, lib, phase, ours, len(new) - ours, " ".join(extra) or "-"])
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=20_000, help="W1 dataset size")
    parser.add_argument("--workers", default="0,2", help="worker counts, comma-separated")
    parser.add_argument("--ways", default=",".join(WAYS), help="ways to run, comma-separated")
    parser.add_argument("--rounds", type=int, default=5, help="wall-clock rounds (medians)")
    parser.add_argument("--instructions", action="store_true", help="count under callgrind")
    parser.add_argument("--importtime", type=int, default=0, metavar="N", help="top N modules")
    parser.add_argument("--child", choices=WAYS, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.data, int(args.workers))), flush=True)
        return
    root = build_dataset(args.samples)
    env = cache_bytecode(("energon_lite",))  # cached bytecode, as bench_peers' children
    env[bench_peers.PEER_DECODE] = "same"
    env["ENERGON_LITE_JPEG_DECODER"] = "auto"
    worker_counts = [int(w) for w in args.workers.split(",")]
    ways = tuple(w for w in args.ways.split(",") if w)
    if set(ways) - set(WAYS):
        parser.error(f"--ways: choose from {WAYS}")
    load_before = os.getloadavg()
    seconds: dict[tuple[str, int], list[list[float]]] = {}
    modules: dict[tuple[str, int], list[list[str]]] = {}
    collections: dict[tuple[str, int], list[tuple[list[int], list[float]]]] = {}
    self_us: dict[str, list[int]] = {}
    for r in range(args.rounds):
        for workers in worker_counts:
            for lib in ab_order(ways, r):
                flags = ("-X", "importtime") if args.importtime and lib == OURS else ()
                result, stderr = run(lib, root, workers, env, *flags)
                seconds.setdefault((lib, workers), []).append(result["seconds"])
                collections.setdefault((lib, workers), []).append(
                    (result["full_gc"], result["full_gc_seconds"])
                )
                modules.setdefault((lib, workers), result["modules"])
                for name, us in importtime_self(stderr).items():
                    if name.split(".")[0] == OURS and workers == worker_counts[-1]:
                        self_us.setdefault(name, []).append(us)
    print(
        f"W1 ({args.samples:,} samples), {os.cpu_count()} CPUs, {args.rounds} rounds; load "
        f"average {'/'.join(f'{x:.1f}' for x in load_before)} before, "
        f"{'/'.join(f'{x:.1f}' for x in os.getloadavg())} after\n"
    )
    print("Modules loaded in each phase (main process):\n")
    rows = module_rows(modules)
    heads = ["workers", "way", "phase", "ours", "others", "packages the torch way never loads"]
    print(markdown_table(heads, rows) + "\n")
    print("Seconds per phase from the interpreter's start (median over rounds):\n")
    rows = []
    for (lib, workers), runs in seconds.items():
        per_phase = [median([run_[i] for run_ in runs]) for i in range(len(PHASES))]
        total = median([sum(run_) for run_ in runs])
        rows.append([workers, lib, *(fmt_num(s, 3) for s in per_phase), fmt_num(total, 3)])
    print(markdown_table(["workers", "way", *PHASES, "from start"], rows) + "\n")
    print("Full garbage collections per phase (main process; seconds in them, median):\n")
    rows = []
    for (lib, workers), runs_ in collections.items():
        cells = []
        for i in range(len(PHASES)):
            counts = sorted({run_[0][i] for run_ in runs_})
            took = median([run_[1][i] for run_ in runs_]) or 0.0
            cells.append("/".join(map(str, counts)) + (f" ({took:.3f} s)" if took else ""))
        total = median([sum(run_[1]) for run_ in runs_]) or 0.0
        rows.append([workers, lib, *cells, f"{total:.3f} s"])
    print(markdown_table(["workers", "way", *PHASES, "seconds in all"], rows) + "\n")
    if self_us:
        top = sorted(self_us.items(), key=lambda kv: -(median(kv[1]) or 0))[: args.importtime]
        total_ms = sum(median(v) or 0 for v in self_us.values()) / 1000
        print(f"-X importtime self ms of our {len(self_us)} modules: {total_ms:.0f} in all\n")
        rows = [[name, fmt_num((median(v) or 0) / 1000, 1)] for name, v in top]
        print(markdown_table(["module", "self ms (median)"], rows) + "\n")
    if args.instructions:
        print("Instructions per phase in the main process (callgrind, millions):\n")
        rows = []
        for workers in worker_counts:
            for lib in ways:
                cmd = [sys.executable, __file__, "--child", lib, "--workers", str(workers)]
                cmd += ["--data", str(root)]
                _, parts = callgrind.phases(cmd, {**env, "PYTHONHASHSEED": "0"}, from_start=True)
                counts = [sum(part.values()) for part in parts[: len(PHASES)]]
                libs: Counter[str] = Counter()
                for part in parts[: len(PHASES)]:
                    for obj, n in part.items():
                        libs[callgrind.library(obj)] += n
                cells = [fmt_num(n / 1e6, 0) for n in counts]
                where = ", ".join(f"{k} {v / 1e6:.0f}" for k, v in libs.most_common(3))
                rows.append([workers, lib, *cells, fmt_num(sum(counts) / 1e6, 0), where])
                print(f"counted: {rows[-1]}", file=sys.stderr, flush=True)
        heads = ["workers", "way", *PHASES, "to first batch", "by library (to first batch)"]
        print(markdown_table(heads, rows))


if __name__ == "__main__":
    main()
