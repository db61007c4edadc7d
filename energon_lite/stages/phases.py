"""``Phases``: one loader worker running several logical pipelines of a canonical layout.

A run defined on a canonical layout of K ranks x Q workers has K x Q logical pipelines
(:class:`energon_lite.worker.CanonicalLayout`); at canonical step ``t`` every canonical rank
takes one batch from its pipeline of phase ``q = t mod Q``. A physical loader worker runs
the phases ``w, w + W ...`` of its rank's canonical ranks: its sources are those pipelines,
phase by phase (``per_phase`` canonical ranks each). Each pipeline ends in a batching stage
that hands out its batch as a plain list of samples; ``next()`` takes one list from each
pipeline of the current phase, joins them in canonical rank order, collates them once and
moves on to the next phase. So the rank's batch holds exactly the samples its canonical
ranks' batches would hold, whatever the physical layout. While a pipeline works, the batch
and sample indices (``current_batch_index``, a blend's schedule step) are spread by its
canonical worker and the canonical workers (``spreads``), as in the canonical run, not by
the loader worker that runs it, and the sample costs its ``Cost`` stage reports reach its
own blend only (each pipeline has its own ledger in the chain's context).

A pipeline that has ended (a finite stream) gives nothing to its phase; a phase whose
pipelines all ended is skipped, and the stream ends when every pipeline has.

Cost per pipeline: its chain's objects and buffers only (the opened datasets, their index
maps and file handles are the process's, shared). A pipeline restores, or starts fresh,
when its phase is first served, so a worker of hundreds of pipelines starts with one
phase's; a save re-saves only the pipelines pulled since the last one and keeps the others'
state objects, which the worker then does not send again, and sends what changed in the
others (``resume/state_delta.py``).

State: the index of the next phase, and each pipeline's own state under ``sources`` (None
for a pipeline that starts fresh when its phase comes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from energon_lite.batching.slab import SlabScope
from energon_lite.errors import (
    SKIPPED,
    ConfigError,
    FailureTracker,
    StateError,
    current_restore_handler,
    restoring,
)
from energon_lite.stages.base import Stage
from energon_lite.stages.batch import collate_or_skip
from energon_lite.state.codec import check_level, state_count
from energon_lite.task_encoder.chain_context import CostLedger


class Phases(Stage):
    STATE_KEYS = ("phase",)
    LAZY_SOURCES = True  # pipelines restore when their phase comes (see restore_state)
    STATS_LABEL = "phases"
    sources: list[Stage]  # always set: pipelines phase by phase
    _phase: int  # the next phase to serve
    _ended: set[int]  # pipelines whose stream has ended
    _saved: list[Any]  # each pipeline's state as last saved
    _touched: set[int]  # pipelines pulled since then
    _pending: dict[int, Any]  # pipelines not restored yet, and their states (None: fresh)
    _handler: Any  # the restore error handler of the worker's restore

    def __init__(
        self,
        sources: list[Stage],
        per_phase: int,
        collate: Callable[[list[Any]], Any],
        failures: FailureTracker | None = None,
        rows: int | None = None,
        spreads: list[tuple[int, int]] | None = None,
    ) -> None:
        if per_phase < 1 or not sources or len(sources) % per_phase:
            raise ConfigError(f"Phases: {len(sources)} pipelines are not phases of {per_phase=}")
        if spreads is not None and len(spreads) != len(sources):
            raise ConfigError(f"Phases: {len(spreads)} spreads for {len(sources)} pipelines")
        self.sources = sources
        # per pipeline (canonical worker, canonical workers): how its indices spread
        self.spreads = spreads
        # per pipeline, the costs its Cost stage reports to its blend (weight_unit: tokens)
        self._costs = [CostLedger() for _ in sources]
        self.per_phase = per_phase
        self.phases = len(sources) // per_phase
        self.collate = collate
        self.failures = failures or FailureTracker(0)
        # images decode straight into the joined batch (batching/slab.py) when its size is
        # fixed (``rows``); the pipelines' batchers then open no scope of their own
        self._slabs: SlabScope | contextlib.nullcontext[None] = (
            SlabScope(rows) if rows else contextlib.nullcontext()
        )

    def next(self) -> Any:
        self._start_if_fresh()
        while len(self._ended) < len(self.sources):
            phase = self._phase
            self._phase = (phase + 1) % self.phases
            first = phase * self.per_phase
            with self._slabs:
                items: list[Any] = []
                for index in range(first, first + self.per_phase):
                    if index in self._ended:
                        continue
                    self._enter(index)
                    self._ready(index)
                    self._touched.add(index)
                    try:
                        items.extend(self.sources[index].next())
                    except StopIteration:
                        self._ended.add(index)
                batch = collate_or_skip(self.collate, items, self.failures) if items else SKIPPED
            if batch is not SKIPPED:
                return batch
        raise StopIteration

    def fetch(self, restore_key: Any) -> Any:
        """A batch again from its items' keys (any pipeline fetches any key: keys route by
        leaf, not by pipeline); a single item's key gives that item."""
        self._enter(0)
        self._ready(0)
        if isinstance(restore_key, list):
            return self.collate([self.sources[0].fetch(key) for key in restore_key])
        return self.sources[0].fetch(restore_key)

    def restore_state(self, state: dict[str, Any] | None) -> None:
        """Each pipeline restores (or starts fresh) when its phase is first served, so a
        worker running hundreds of pipelines starts or resumes with one phase's; until then
        a pipeline's state is the one it was given."""
        if state is not None:
            check_level(type(self).__name__, self.STATE_KEYS, "sources", state)
            self._validate(state)
            if len(state["sources"]) != len(self.sources):
                raise StateError(
                    f"Phases: state has {len(state['sources'])} pipelines, this worker runs "
                    f"{len(self.sources)}; was it saved with another canonical layout?"
                )
        self._reset()
        if state is not None:
            self._phase = state["phase"]
            self._saved = list(state["sources"])
        self._pending = dict(enumerate(self._saved))
        self._touched = set()
        self._handler = current_restore_handler()
        self._started = True

    def _enter(self, index: int) -> None:
        """Pipeline ``index`` works next: the chain's indices spread as its canonical
        worker's, and its costs reach its own blend only."""
        context = self.context
        if self.spreads is not None:
            context.index.worker, context.index.workers = self.spreads[index]
        context.costs = self._costs[index]

    def _ready(self, index: int) -> None:
        """Restore pipeline ``index`` if it has not been yet."""
        if index in self._pending:
            state = self._pending.pop(index)
            with restoring(self._handler):
                self.sources[index].restore_state(state)

    def save_state(self) -> dict[str, Any]:
        """Only the pipelines pulled since the last save are saved again; the others keep
        the very state object saved before, so a worker sends the trainer only what changed
        (:mod:`energon_lite.resume.state_delta`)."""
        self._start_if_fresh()
        for index in sorted(self._touched):
            self._enter(index)
            self._saved[index] = self.sources[index].save_state()
        self._touched.clear()
        return {"type": type(self).__name__, **self._save(), "sources": list(self._saved)}

    def _reset(self) -> None:
        self._phase = 0
        self._ended = set()
        self._saved = [None] * len(self.sources)
        self._touched = set(range(len(self.sources)))

    def _save(self) -> dict[str, Any]:
        return {"phase": self._phase}

    def _validate(self, state: dict[str, Any]) -> None:
        phase = state_count(state["phase"], "Phases phase")
        if phase >= self.phases:
            raise StateError(f"Phases: saved phase={phase} outside [0, {self.phases})")


def as_list(items: list[Any]) -> list[Any]:
    """The collate of a pipeline's batching stage under :class:`Phases`: the samples as a
    list, collated once the phase's lists are joined."""
    return items
