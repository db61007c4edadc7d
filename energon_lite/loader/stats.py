"""``LoaderStats``: the trainer's side of ``loader.stats()``: the workers' counters added up.

Every worker sends a :class:`~energon_lite.loader.probe.ChainProbe` snapshot with each batch
(cumulative counters, a few hundred bytes). The loader keeps the last snapshot of each
worker among the batches the trainer *received*, so the figures describe exactly the
batches handed out, like the loader state does. When a pass ends (or a restore starts a new
stream) the counters of the finished stream are folded into totals.

``summary()`` is the dict ``loader.stats()`` returns; ``docs/performance.md`` explains it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from energon_lite.loader.probe import stage_of
from energon_lite.loader.trace import TraceBuffer

_SUMMED = ("own_ns", "out", "held_sum")  # per-stage lists
_COUNTS = ("snapshots", "batches", "busy_ns", "wall_ns")
# the storage counters every summary has (storage.session.RetryStats)
STORAGE_COUNTERS = ("requests", "retries", "failures", "bytes", "cache_hits", "cache_misses")


def _fold(total: dict[str, Any] | None, snap: dict[str, Any]) -> dict[str, Any]:
    """``total + snap`` for counters (the layout is the snapshot's)."""
    if total is None or total["names"] != snap["names"]:
        return {**snap, **{k: list(snap[k]) for k in _SUMMED}}
    out = dict(total)
    for key in _SUMMED:
        out[key] = [a + b for a, b in zip(total[key], snap[key])]
    for key in _COUNTS:
        out[key] = total[key] + snap[key]
    out["storage"] = _add(total.get("storage", {}), snap.get("storage", {}))
    out["held"] = snap["held"]
    return out


def _add(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in sorted(set(a) | set(b))}


class LoaderStats:
    """Collects worker snapshots and the trainer's waiting time; ``summary()`` reads them.

    ``summary()`` may be called from another thread (a Prometheus scrape) while the trainer
    receives batches: a lock keeps the reading whole."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._finished: dict[int, dict[str, Any]] = {}  # per worker: counters of ended streams
        self._live: dict[int, dict[str, Any]] = {}  # per worker: last snapshot of this stream
        self._start: int | None = None
        self._last: int | None = None
        self._wait_ns = 0
        self._batches = 0
        self.trace: TraceBuffer | None = None  # loader.start_trace()
        self._labels: dict[tuple[Any, ...], list[str]] = {}  # the trace's stage names

    def locked(self) -> threading.Lock:
        """``with stats.locked():`` reads the trace whole while batches arrive."""
        return self._lock

    def begin_stream(self) -> None:
        """A new stream of batches starts (a pass, or after a restore)."""
        with self._lock:
            self._begin_stream()

    def _begin_stream(self) -> None:
        for worker, snap in self._live.items():
            done = _fold(self._finished.get(worker), snap)
            done["held"] = [0] * len(done["names"])  # what a finished stream held is gone
            self._finished[worker] = done
        self._live = {}
        if self._start is None:
            self._start = time.perf_counter_ns()

    def received(
        self, snapshot: dict[str, Any] | None, wait_ns: int, got_ns: int | None = None
    ) -> None:
        """The trainer received a batch after waiting ``wait_ns`` for it (it came at
        ``got_ns``, for the trace)."""
        with self._lock:
            self._last = time.perf_counter_ns()
            if self.trace is not None:
                self._traced(snapshot, self._last - wait_ns, got_ns or self._last)
            self._wait_ns += wait_ns
            self._batches += 1
            if snapshot is not None:
                self._live[snapshot["worker"]] = snapshot

    def _traced(self, snapshot: dict[str, Any] | None, asked: int, got: int) -> None:
        assert self.trace is not None and self._last is not None
        self.trace.trainer_events(asked, got, self._last)
        if snapshot is not None:
            key = (tuple(snapshot["names"]), tuple(snapshot["inside"]))
            labels = self._labels.get(key)
            if labels is None:  # once per chain layout, not per event
                from energon_lite.loader.stats_report import label  # with a trace only

                labels = [label({"name": n, "inside": i}) for n, i in zip(*key)]
                self._labels[key] = labels
            self.trace.worker_events(snapshot, labels)

    def _per_worker(self) -> dict[int, dict[str, Any]]:
        merged: dict[int, dict[str, Any]] = {}
        for worker in sorted(set(self._finished) | set(self._live)):
            total = self._finished.get(worker)
            live = self._live.get(worker)
            if total is not None and live is not None:
                merged[worker] = _fold(total, live)
            else:
                merged[worker] = dict(total or live or {})
        return merged

    def summary(self) -> dict[str, Any]:
        """Per-stage time and counts, buffers, workers, samples/s (see docs/performance.md)."""
        with self._lock:
            return self._summary()

    def _summary(self) -> dict[str, Any]:
        workers = self._per_worker()
        elapsed = ((self._last or 0) - (self._start or 0)) / 1e9 if self._last else 0.0
        busy_total = sum(w["busy_ns"] for w in workers.values())
        stages = _stages(list(workers.values()), busy_total)
        samples = _samples_delivered(stages)
        known = sum(s["time_s"] for s in stages)
        other = max(0.0, busy_total / 1e9 - known)
        return {
            "elapsed_s": elapsed,
            "batches": self._batches,
            "samples": samples,
            "samples_per_s": samples / elapsed if elapsed > 0 else 0.0,
            "wait_s": self._wait_ns / 1e9,
            "wait_fraction": self._wait_ns / 1e9 / elapsed if elapsed > 0 else 0.0,
            "stages": stages,
            "other": {
                "time_s": other,
                "fraction": other * 1e9 / busy_total if busy_total else 0.0,
            },
            "workers": [
                {
                    "worker": worker,
                    "batches": w["batches"],
                    "busy_s": w["busy_ns"] / 1e9,
                    "idle_s": max(0, w["wall_ns"] - w["busy_ns"]) / 1e9,
                    "busy_fraction": w["busy_ns"] / w["wall_ns"] if w["wall_ns"] else 0.0,
                }
                for worker, w in workers.items()
            ],
            "storage": _storage(workers.values()),
        }


def _storage(workers: Any) -> dict[str, int]:
    """The storage counters of all workers added up (zeros before any batch)."""
    total = dict.fromkeys(STORAGE_COUNTERS, 0)
    for w in workers:
        total = _add(total, w.get("storage", {}))
    return total


def _stages(workers: list[dict[str, Any]], busy_total: int) -> list[dict[str, Any]]:
    """Per-stage figures summed over the workers (all workers run the same chain)."""
    if not workers:
        return []
    layout = workers[0]
    n = len(layout["names"])
    own = [sum(w["own_ns"][i] for w in workers) for i in range(n)]
    out = [sum(w["out"][i] for w in workers) for i in range(n)]
    held = [sum(w["held"][i] for w in workers) for i in range(n)]
    # mean fill of all workers' buffers together: each worker's mean over its batches, summed
    mean_held = [
        sum(w["held_sum"][i] / w["snapshots"] for w in workers if w["snapshots"]) for i in range(n)
    ]
    stages = []
    for i, name in enumerate(layout["names"]):
        hook = layout["inside"][i] is not None
        feeders = [j for j in range(n) if layout["feeds"][j] == i]
        items_in = out[i] if hook else sum(out[j] for j in feeders) if feeders else None
        capacity = layout["capacity"][i]
        buffered = capacity is not None or any(w["held_sum"][i] for w in workers)
        stages.append(
            {
                "name": name,
                "feeds": None
                if layout["feeds"][i] is None
                else layout["names"][layout["feeds"][i]],
                "inside": None if not hook else layout["names"][layout["inside"][i]],
                "items_in": items_in,
                "items_out": out[i],
                "held": held[i],
                "capacity": None if capacity is None else capacity * len(workers),
                "mean_held": mean_held[i] if buffered else None,
                "time_s": own[i] / 1e9,
                "us_per_item": own[i] / 1e3 / out[i] if out[i] else 0.0,
                "fraction": own[i] / busy_total if busy_total else 0.0,
            }
        )
    return stages


def _samples_delivered(stages: list[dict[str, Any]]) -> int:
    """Samples in the batches handed out: what entered the batching stage, less what it holds."""
    for stage in stages:
        cls = None if stage["inside"] else stage_of(stage["name"])
        if cls is not None and cls.STATS_BATCHES:
            return int(stage["items_in"] - stage["held"])
    return int(stages[-1]["items_out"]) if stages else 0
