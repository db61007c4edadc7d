"""``ChainProbe``: where one worker's time goes, stage by stage (``get_savable_loader(stats=True)``).

A worker's chain is built, then the probe replaces each stage's ``next`` with a timed
version *on that instance* (stages call ``self.source.next()``, so the parents are timed
too). Nothing else changes: states, restore keys and ``fetch`` go through the stages as
before. Per call the wrapper reads ``time.perf_counter_ns`` twice and keeps the stage's
*own* time: its inclusive time minus the inclusive time of the calls it made to its parents
(a shared accumulator does the subtraction, so there is no per-item list or dict). Measured
overhead on the W1 pipeline is in ``benchmarks/README.md`` ("Loader stats overhead").

A user's hook a stage calls per item (``Stage.STATS_HOOK``: Encode's ``encode_sample`` or
``preencode_sample``) is timed the same way as a pseudo-stage, so decoding and the user's
hook show up separately. A stage's row is named by its class, or by its ``stats_name()``
(``"Reader 1"``: the leaf) when the chain has several stages of that class.

``snapshot()`` is plain data (lists of ints), sent with every batch to the trainer, where
:class:`energon_lite.loader.stats.LoaderStats` adds the workers up. It carries the storage
counters too (requests, retries, bytes, shard cache hits and misses: ``storage.session``),
counted from the probe's start: a forked worker's counters begin at its parent's values.

With ``trace_events > 0`` the probe also keeps each call as ``(stage, start_ns, spent_ns)``
(at most that many per worker, then it counts what it left out) plus the time from the
chain's batch to the snapshot (``"send"``: saving the state, checking the batch can be sent),
and hands the new ones out with each snapshot (``"events"``): the timeline
:mod:`energon_lite.loader.trace` writes. Without it a timed call only checks that it keeps
no events.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from energon_lite.stages.base import Stage, stage_class
from energon_lite.storage.session import session


def _ordered(stage: Stage) -> list[Stage]:
    """The chain's stages, each after the stages that feed it (readers first)."""
    out: list[Stage] = []
    for parent in stage._parents():
        out.extend(_ordered(parent))
    out.append(stage)
    return out


def stage_of(name: str) -> type[Stage] | None:
    """The stage class of a row name (``"Reader 1"``, ``"Encode #2"``); None for a hook."""
    return stage_class(name.split(" ")[0])


class ChainProbe:
    """Counts and times every stage of one built (not yet started) chain."""

    def __init__(self, chain: Stage, worker: int, trace_events: int = 0) -> None:
        self.worker = worker
        self._events: list[tuple[int, int, int]] | None = [] if trace_events > 0 else None
        self._room = trace_events  # events this worker may still record
        self._dropped = 0
        self._produced = 0  # when the chain's last batch came out (the trace's "send" start)
        self.names: list[str] = []
        self.feeds: list[int | None] = []  # index of the stage each stage hands its items to
        self.inside: list[int | None] = []  # a hook: index of the stage that calls it
        self._stages: list[Stage | None] = []  # None for a hook pseudo-stage
        self._ns: list[int] = []  # own time per stage
        self._out: list[int] = []  # items handed out (calls, for a hook) per stage
        self._child = [0]  # inclusive time of the calls made by the running call
        ordered = _ordered(chain)
        of_class = Counter(type(stage) for stage in ordered)
        index: dict[int, int] = {}
        for stage in ordered:
            cls = type(stage)
            name = stage.stats_name() if of_class[cls] > 1 else cls.__name__
            index[id(stage)] = self._add(stage, name, None)
            stage.next = self._timed(index[id(stage)], stage.next)  # type: ignore[method-assign]
            attribute = cls.STATS_HOOK
            hook = getattr(stage, attribute, None) if attribute else None
            if attribute and callable(hook):  # the user's per-item hook, inside the stage
                i = self._add(None, str(getattr(hook, "__name__", attribute)), index[id(stage)])
                setattr(stage, attribute, self._timed(i, hook))
        for stage in ordered:
            for parent in stage._parents():
                self.feeds[index[id(parent)]] = index[id(stage)]
        self._held_sum = [0] * len(self.names)
        self._snapshots = 0
        self._batches = 0
        self._start = self._resumed = time.perf_counter_ns()
        self._busy = 0
        self._storage_base = session().stats.snapshot()

    def _add(self, stage: Stage | None, name: str, inside: int | None) -> int:
        taken = sum(1 for n in self.names if n == name or n.startswith(name + " #"))
        self.names.append(name if not taken else f"{name} #{taken + 1}")
        self.feeds.append(None)
        self.inside.append(inside)
        self._stages.append(stage)
        self._ns.append(0)
        self._out.append(0)
        return len(self.names) - 1

    def _timed(self, i: int, inner: Callable[..., Any]) -> Callable[..., Any]:
        own, out, child, clock = self._ns, self._out, self._child, time.perf_counter_ns
        events = self._events  # the trace's, or None

        def timed(*args: Any) -> Any:
            start = clock()
            outer = child[0]
            child[0] = 0
            try:
                item = inner(*args)
            finally:
                spent = clock() - start
                own[i] += spent - child[0]
                child[0] = outer + spent
                if events is not None:  # bounded when the batch's snapshot is taken
                    events.append((i, start, spent))
            out[i] += 1
            return item

        return timed

    # the worker loop's hooks -------------------------------------------------------------

    def resume(self) -> None:
        """The worker loop works again (after handing a batch out)."""
        self._resumed = time.perf_counter_ns()

    def produced(self) -> None:
        """The chain handed a batch out (tracing: the start of its "send")."""
        self._produced = time.perf_counter_ns()

    def snapshot(self) -> dict[str, Any]:
        """Cumulative counters after one more batch: plain data, sent with the batch."""
        now = time.perf_counter_ns()
        events = self._events
        if events is not None and self._produced:
            events.append((-1, self._produced, now - self._produced))  # -1: "send"
        self._busy += now - self._resumed
        self._batches += 1
        self._snapshots += 1
        held = [0] * len(self.names)
        capacity: list[int | None] = [None] * len(self.names)
        for i, stage in enumerate(self._stages):  # buffers exist once the chain started
            found = stage.stats_held() if stage is not None else None
            if found is not None:
                held[i], capacity[i] = found
                self._held_sum[i] += found[0]
        storage = session().stats.snapshot()
        traced: dict[str, Any] = {}
        if events is not None:
            if len(events) > self._room:  # what the room left keeps, the rest is counted
                self._dropped += len(events) - self._room
                del events[self._room :]
            self._room -= len(events)
            traced = {"events": list(events), "dropped": self._dropped}
            events.clear()
        return {
            "worker": self.worker,
            "names": self.names,
            "feeds": self.feeds,
            "inside": self.inside,
            "own_ns": list(self._ns),
            "out": list(self._out),
            "held": held,
            "capacity": capacity,
            "held_sum": list(self._held_sum),
            "snapshots": self._snapshots,
            "batches": self._batches,
            "busy_ns": self._busy,
            "wall_ns": now - self._start,
            "storage": {k: v - self._storage_base.get(k, 0) for k, v in storage.items()},
            **traced,
        }
