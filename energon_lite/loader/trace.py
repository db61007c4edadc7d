"""A rank's loader timeline in the Chrome trace-event format (Perfetto, ``chrome://tracing``).

``loader.start_trace()`` (before the first batch) makes every worker's stats probe keep each
stage call as an event (:class:`~energon_lite.loader.probe.ChainProbe`: read, shuffle,
decode, your ``encode_sample``, pack, batch, then ``send``: saving the state and checking
the batch can be sent) and the trainer keep, per batch, how long it waited (``wait``) and
how long the loader took to hand the batch over once it came (``receive``).
``loader.write_trace(path)`` writes them:

* one process per rank (``pid`` = rank), one thread per worker (``tid`` = worker + 1) and
  the trainer (``tid`` 0), named by metadata events;
* complete events (``"ph": "X"``) timed in microseconds from the trace's start on the
  monotonic clock all processes of a node share; ``otherData.start_unix_ns`` is that start
  on the wall clock, so :func:`merge_traces` lines up the files of several ranks, even of
  several nodes, in one file;
* a stage's call contains the calls it made to its parents, so its own time is its
  duration less its children's, and these add up to ``loader.stats()``'s ``time_s``;
* bounded: at most ``max_events`` events per worker and as many for the trainer, over the
  loader's life (about 100 bytes each in the file); what did not fit is counted per thread
  in ``otherData.dropped``.

Events of batches the trainer never received (prefetched when the loader closed) are not in
the file, as they are not in ``stats()``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from energon_lite.errors import ConfigError

__all__ = ["DEFAULT_MAX_EVENTS", "TraceBuffer", "merge_traces"]

DEFAULT_MAX_EVENTS = 100_000


class TraceBuffer:
    """The trainer's side: the workers' events as they arrive with the batches received."""

    def __init__(self, rank: int, max_events: int = DEFAULT_MAX_EVENTS) -> None:
        if max_events < 1:
            raise ConfigError(f"start_trace({max_events=}): must be >= 1")
        self.rank = rank
        self.max_events = max_events
        # the start on the monotonic clock all processes of a node share, and on the wall clock
        self.start_ns = time.perf_counter_ns()
        self.start_unix_ns = time.time_ns()
        self._events: list[tuple[int, str, int, int]] = []  # the trainer's (tid, name, start, dur)
        # the workers' events as they came: (tid, stage names, [(stage, start_ns, dur_ns)])
        self._chunks: list[tuple[int, list[str], list[Any]]] = []
        self._kept: dict[int, int] = {}  # events kept per thread
        self._dropped: dict[str, int] = {}  # per thread name
        self._probe_dropped: dict[int, int] = {}  # per worker: its probe's last count

    def worker_events(self, snapshot: dict[str, Any], labels: list[str]) -> None:
        """The events a worker sent with a batch (``labels[i]`` names stage ``i``): kept as
        they came, named only when the trace is written."""
        worker = snapshot["worker"]
        tid = worker + 1
        events = snapshot.get("events") or []
        kept = self._kept.get(tid, 0)
        room = self.max_events - kept
        if len(events) > room:
            self._drop(f"worker {worker}", len(events) - max(0, room))
            events = events[: max(0, room)]
        if events:
            self._chunks.append((tid, labels, events))
            self._kept[tid] = kept + len(events)
        # the probe's own count of what it did not record (a new probe, after a restore or a
        # new pass, counts from 0 again)
        left_out = snapshot.get("dropped", 0)
        before = self._probe_dropped.get(worker, 0)
        self._drop(f"worker {worker}", left_out - before if left_out >= before else left_out)
        self._probe_dropped[worker] = left_out

    def _drop(self, thread: str, count: int) -> None:
        if count:
            self._dropped[thread] = self._dropped.get(thread, 0) + count

    def trainer_events(self, asked_ns: int, got_ns: int, done_ns: int) -> None:
        """One batch on the trainer's side: waited from ``asked_ns``, came at ``got_ns``,
        handed to the training loop at ``done_ns``."""
        if self._kept.get(0, 0) + 2 > self.max_events:
            self._drop("trainer", 2)
            return
        self._kept[0] = self._kept.get(0, 0) + 2
        self._events.append((0, "wait", asked_ns, got_ns - asked_ns))
        self._events.append((0, "receive", got_ns, done_ns - got_ns))

    def chrome(self) -> dict[str, Any]:
        """The trace as Chrome's JSON object format."""
        pid = self.rank
        spans = self._events + [
            (tid, "send" if i < 0 else labels[i], start, spent)
            for tid, labels, events in self._chunks
            for i, start, spent in events
        ]
        threads = sorted({tid for tid, _, _, _ in spans} | {0})
        meta: list[dict[str, Any]] = [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
             "args": {"name": f"energon_lite rank {pid}"}},
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
             "args": {"sort_index": pid}},
        ]  # fmt: skip
        for tid in threads:
            name = "trainer" if tid == 0 else f"worker {tid - 1}"
            meta.append(
                {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}
            )
        # nested calls share a start only when a parent's clock read and its child's fell in
        # one nanosecond: the longer (the parent) first keeps viewers' nesting right
        ordered = sorted(spans, key=lambda e: (e[0], e[2], -e[3]))
        events = [
            {"ph": "X", "cat": "trainer" if tid == 0 else "stage", "name": name,
             "pid": pid, "tid": tid, "ts": (start - self.start_ns) / 1e3, "dur": dur / 1e3}
            for tid, name, start, dur in ordered
        ]  # fmt: skip
        return {
            "traceEvents": meta + events,
            "displayTimeUnit": "ms",
            "otherData": {
                "rank": pid,
                "start_unix_ns": self.start_unix_ns,
                "max_events": self.max_events,
                "dropped": self._dropped,
            },
        }

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write the trace to ``path`` (a ``.json`` file); returns the path."""
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(self.chrome(), separators=(",", ":")))
        return out


def merge_traces(paths: list[str | os.PathLike[str]], out: str | os.PathLike[str]) -> Path:
    """One trace of several ranks' files (each rank is its own process in the viewer), on
    one timeline from the earliest start."""
    traces: list[tuple[Any, dict[str, Any]]] = []
    for path in paths:
        try:
            trace = json.loads(Path(path).read_text())
            rank, start = trace["otherData"]["rank"], int(trace["otherData"]["start_unix_ns"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"merge_traces: {path} is not a loader trace ({exc!r})") from None
        if any(rank == other["otherData"]["rank"] for _, other in traces):
            raise ConfigError(f"merge_traces: {path} is rank {rank} again; give each rank once")
        traces.append((start, trace))
    first = min((start for start, _ in traces), default=0)
    events: list[Any] = []
    dropped: dict[str, Any] = {}
    ranks: list[int] = []
    for start, trace in traces:
        shift = (start - first) / 1e3
        for event in trace["traceEvents"]:
            events.append({**event, "ts": event["ts"] + shift} if "ts" in event else event)
        ranks.append(trace["otherData"]["rank"])
        dropped[str(ranks[-1])] = trace["otherData"].get("dropped", {})
    target = Path(out)
    merged = {"traceEvents": events, "displayTimeUnit": "ms",
              "otherData": {"ranks": ranks, "start_unix_ns": first, "dropped": dropped}}  # fmt: skip
    target.write_text(json.dumps(merged, separators=(",", ":")))
    return target
