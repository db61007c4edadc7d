"""States moved between layouts of one canonical run.

``get_train_dataset(..., canonical_layout=(K, Q))`` defines the run's global batches on K
ranks x Q workers (:class:`energon_lite.worker.CanonicalLayout`); a layout of R ranks x W
workers with R | K and W | Q runs the K x Q logical pipelines (``stages/phases.py``) and
gives the canonical global batches (:func:`energon_lite.loader.canonical.canonical_for`
checks the option).

:func:`relayout` turns the states of every old rank into this layout's: it reads them as
the K x Q pipelines' states plus the next canonical phase (:class:`Logical`), whatever
layout saved them, and deals the pipelines to the new ranks and workers. Only the global
batch size G = ranks x batch_size must be the same. States of another canonical layout (or
of a layout that did not reproduce one) go through the exactly-once redistribution
(:func:`energon_lite.resume.elastic.redistribute`) onto this run's pipelines first; from
there on any reproducing layout continues the same run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from energon_lite.errors import StateError, short_repr
from energon_lite.resume.levels import StageClasses
from energon_lite.resume.rank_state import RankState, SavedRun
from energon_lite.resume.target import RestoreTarget
from energon_lite.stages.phases import Phases
from energon_lite.worker import CanonicalLayout, WorkerConfig, WorkerSlot

log = logging.getLogger(__name__)


@dataclass
class Logical:
    """A run's position as its canonical pipelines: what any reproducing layout restores."""

    layout: CanonicalLayout
    pipelines: list[Any]  # by logical id k * Q + q; None: not started
    phase: int  # the canonical phase of the next step
    config: dict[str, Any]  # the old rank 0's config
    epoch: int
    in_pass: int
    paths: list[str] | None  # where the datasets were read from (messages only)


@dataclass(frozen=True)
class Move:
    """How a run where the restoring loader or the old one has a canonical layout moves to
    the restoring loader's layout (:func:`move_of`, then :func:`relayout`)."""

    old: SavedRun  # the old states as plain chains: checked to own their work once, then moved
    with_plan: bool  # checked against the dataset's plan per leaf (not when plain chains result)
    onto: tuple[int, int] | None  # redistributed onto (ranks, workers) first; None: moved whole
    logical: Logical | None  # the old run's pipelines, where they move whole


def move_of(run: SavedRun, target: RestoreTarget) -> Move | None:
    """How ``run`` moves to the ``target`` loader's layout, where it or the ``target``
    loader has a canonical layout; None where the old states are plain chains of a layout
    that did not reproduce its canonical one and that loader has none (the plain paths
    apply)."""
    wc, layout = target.worker_config, target.canonical
    logical = _logical(run, target.stages)
    if logical is None and layout is None:
        return None  # plain chains of a layout that did not reproduce its canonical one
    # the old states as plain chains: of its canonical pipelines, or as they were saved
    old = run if logical is None else _expanded(logical, target.config)
    if logical is not None and logical.layout != layout:
        _warn_fallback(logical.layout, wc)
    if layout is None:  # this layout does not reproduce a canonical one: its own chains
        return Move(old, False, (wc.world_size, wc.num_workers), None)
    if logical is None or logical.layout != layout:  # onto this run's pipelines first
        return Move(old, True, (layout.ranks, layout.workers), None)
    return Move(old, True, None, logical)


def relayout(move: Move, moved: list[RankState], target: RestoreTarget) -> list[RankState]:
    """Every rank's state for the ``target`` loader's layout from the old states ``moved``
    as ``move`` says (redistributed onto ``move.onto`` where it says so)."""
    wc, classes = target.worker_config, target.stages
    layout, current = target.canonical, target.config
    shape = target.shape(wc.slot(0))  # the chain above the pipelines (encode_batch)
    if layout is None:  # this layout does not reproduce a canonical one: its own chains
        return [_with_config(state, current, shape, classes) for state in moved]
    logical = move.logical
    if logical is None:  # redistributed onto this run's pipelines
        logical = Logical(
            layout,
            [stateless_removed(level, classes) for state in moved for level in state.workers],
            0,
            moved[0].config,
            moved[0].epoch,
            0,
            move.old.paths,
        )
    return _physical(logical, wc, current, shape)


def _warn_fallback(old: CanonicalLayout, wc: WorkerConfig) -> None:
    log.warning(
        "restoring states of canonical layout (%d, %d) on %d ranks x %d workers of another "
        "canonical layout or none: the rest of the epoch is delivered exactly once, in "
        "another order than the old run's",
        old.ranks, old.workers, wc.world_size, wc.num_workers,
    )  # fmt: skip


def _logical(run: SavedRun, classes: StageClasses) -> Logical | None:
    """The old states as canonical pipelines; None for plain chains of a layout that did
    not reproduce its canonical one."""
    config = run.config
    ranks, workers = config["world_size"], max(1, int(config["num_workers"]))
    saved = config.get("canonical_layout")
    layout = CanonicalLayout(*saved) if saved is not None else CanonicalLayout(ranks, workers)
    if saved is not None and not layout.reproduced_by(ranks, config["num_workers"]):
        return None
    pipelines: list[Any] = [None] * (layout.ranks * layout.workers)
    phases = {}
    for rank, state in enumerate(run.ranks):
        next_worker = state.next_worker
        for worker, level in enumerate(state.workers):
            level = stateless_removed(level, classes)
            if saved is None:  # a plain chain is the canonical pipeline of its own layout
                pipelines[rank * workers + worker] = level
                phases[rank] = next_worker
                continue
            slots = layout.slots(WorkerSlot(rank, ranks, worker, workers, 0))
            sources, index = [None] * len(slots), 0
            if level is not None:
                sources, index = read_phases_level(level, f"old rank {rank} worker {worker}")
                own = layout.phases_of(worker, workers)
                if (
                    len(sources) != len(slots)
                    or not isinstance(index, int)
                    or not 0 <= index < len(own)
                ):
                    raise StateError(
                        f"old rank {rank} worker {worker}: {len(sources)} pipelines at phase "
                        f"{short_repr(index)}, its layout has {len(slots)} in {len(own)} phases"
                    )  # fmt: skip
            for slot, source in zip(slots, sources):
                pipelines[slot.rank * layout.workers + slot.worker_id] = source
            if worker == next_worker:
                phases[rank] = layout.phases_of(worker, workers)[index]
    if len(set(phases.values())) != 1:
        raise StateError(
            f"the old ranks were saved at different steps (next canonical phase per rank: "
            f"{phases}); save every rank at the same step (save_state_global)"
        )
    return Logical(
        layout,
        pipelines,
        phases[0],
        config,
        run.epoch,
        max(state.in_pass for state in run.ranks),
        run.paths,
    )


def _expanded(logical: Logical, current: dict[str, Any]) -> SavedRun:
    """The pipelines as the plain states of K ranks x Q workers (what the elastic checks and
    redistribution read): pipeline k * Q + q is worker q of rank k."""
    layout = logical.layout
    config = {key: value for key, value in logical.config.items() if key != "canonical_layout"}
    size = current.get("batch_size")  # buffers hold keys, not batches: any batch size deals
    config.update(world_size=layout.ranks, num_workers=layout.workers, batch_size=size)
    ranks = [
        RankState(
            config={**config, "rank": rank},
            epoch=logical.epoch,
            next_worker=logical.phase,
            workers=logical.pipelines[rank * layout.workers : (rank + 1) * layout.workers],
            in_pass=logical.in_pass,
        )
        for rank in range(layout.ranks)
    ]
    return SavedRun(ranks, ranks[0].config, logical.epoch)


def _with_config(
    state: RankState, current: dict[str, Any], shape: dict[str, Any], classes: StageClasses
) -> RankState:
    """A redistributed state with this loader's config (and chain ``shape``)."""
    return replace(
        state,
        config={**current, "rank": state.rank},
        workers=[stateless_added(shape, stateless_removed(w, classes)) for w in state.workers],
    )


def _physical(
    logical: Logical, wc: WorkerConfig, current: dict[str, Any], shape: dict[str, Any]
) -> list[RankState]:
    """Every rank's state of this layout: each loader worker's pipelines, and the phase it
    serves next so that the workers polled in turn continue the canonical phase order."""
    layout, workers = logical.layout, wc.workers_per_rank
    phase = logical.phase
    out = []
    for rank in range(wc.world_size):
        levels: list[Any] = []
        for worker in range(workers):
            slots = layout.slots(WorkerSlot(rank, wc.world_size, worker, workers, 0))
            sources = [logical.pipelines[s.rank * layout.workers + s.worker_id] for s in slots]
            first = (phase + (worker - phase) % workers) % layout.workers  # its next phase
            index = first // workers
            level: Any = None
            if index or any(source is not None for source in sources):
                level = stateless_added(shape, phases_level(index, sources))
            levels.append(level)
        out.append(
            RankState(
                config={**current, "rank": rank},
                epoch=logical.epoch,
                next_worker=phase % workers,
                workers=levels,
                in_pass=logical.in_pass,
                paths=logical.paths,
            )
        )
    return out


# a Phases level and the stateless levels above it ----------------------------------------


def stateless_removed(level: Any, classes: StageClasses) -> Any:
    """A saved chain without its top levels that hold no state of their own (``encode_batch``'s
    map above the batching stage): the part a logical pipeline saves."""
    while isinstance(level, dict) and "source" in level:
        cls = classes.of(level)
        if cls is None or cls.STATE_KEYS or cls.OPTIONAL_KEYS:
            break
        level = level["source"]
    return level


def stateless_added(shape: dict[str, Any], level: Any) -> Any:
    """``level`` under the stateless levels a chain's declared ``shape`` has above it."""
    if level is None or shape["type"] == level.get("type"):
        return level
    if shape["keys"] or "source" not in shape:
        raise StateError(
            f"a {level.get('type')} state does not fit under {shape['type']} (a stage with "
            "state of its own); the pipeline has another stage set"
        )
    return {"type": shape["type"], "source": stateless_added(shape["source"], level)}


def phases_level(phase: int, sources: list[Any]) -> dict[str, Any]:
    """A saved :class:`Phases` level: the next phase and its pipelines' states."""
    return {"type": Phases.__name__, "phase": phase, "sources": sources}


def read_phases_level(level: Any, where: str) -> tuple[list[Any], int]:
    """(the pipelines' states, the next phase) of a saved :class:`Phases` level."""
    if (
        not isinstance(level, dict)
        or level.get("type") != Phases.__name__
        or not isinstance(level.get("sources"), list)
    ):
        raise StateError(
            f"{where}: a state of a canonical layout holds its pipelines (Phases), got "
            f"{short_repr(level)}"
        )
    phase = level.get("phase")
    if isinstance(phase, bool) or not isinstance(phase, int):
        raise StateError(f"{where}: Phases phase={short_repr(phase)} is corrupt")
    return level["sources"], phase


def pipeline_trees(
    workers: list[Any], wc: WorkerConfig, layout: CanonicalLayout, classes: StageClasses
) -> list[RankState]:
    """A rank's worker states as the canonical layout's K ranks of Q pipelines (what the
    ownership check reads: pipeline k * Q + q is worker q of rank k, at its canonical global
    worker), this rank's pipelines in their places and None elsewhere."""
    pipelines: list[Any] = [None] * (layout.ranks * layout.workers)
    for worker, level in enumerate(workers):
        if level is None:
            continue
        sources, _ = read_phases_level(stateless_removed(level, classes), f"worker {worker}")
        slots = layout.slots(WorkerSlot(wc.rank, wc.world_size, worker, wc.workers_per_rank, 0))
        for slot, source in zip(slots, sources):
            pipelines[slot.rank * layout.workers + slot.worker_id] = source
    q = layout.workers
    return [
        RankState({"rank": k}, 0, 0, pipelines[k * q : (k + 1) * q], 0) for k in range(layout.ranks)
    ]
