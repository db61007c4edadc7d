"""Canonical layouts in the trainer: which guarantee a layout gives, and states moved between
layouts that reproduce the same run.

``get_train_dataset(..., canonical_layout=(K, Q))`` defines the run's global batches on K
ranks x Q workers (:class:`energon_lite.worker.CanonicalLayout`). A layout of R ranks x W
workers with R | K and W | Q runs the K x Q logical pipelines (``stages/phases.py``) and
gives the canonical global batches; any other layout runs chains of its own and delivers
every sample once, in an order of its own. :func:`canonical_for` checks the option and says
once which guarantee holds.

:func:`relayout` turns the states of every old rank into this layout's: it reads them as
the K x Q pipelines' states plus the next canonical phase (:class:`Logical`), whatever
layout saved them, and deals the pipelines to the new ranks and workers. Only the global
batch size G = ranks x batch_size must be the same. States of another canonical layout (or
of a layout that did not reproduce one) go through the exactly-once redistribution
(:func:`energon_lite.stages.elastic.redistribute`) onto this run's pipelines first; from
there on any reproducing layout continues the same run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from energon_lite.errors import ConfigError, StateError, short_repr
from energon_lite.stages.phases import (
    phases_level,
    read_phases_level,
    stateless_added,
    stateless_removed,
)
from energon_lite.state.codec import STATE_VERSION, check_same_config, state_digest
from energon_lite.task_encoder.base import DefaultTaskEncoder, TaskEncoder
from energon_lite.worker import CanonicalLayout, WorkerConfig, WorkerSlot

if TYPE_CHECKING:
    from energon_lite.loader.savable_dataset import SavableDataset
    from energon_lite.stages.elastic import LeafPlan

log = logging.getLogger(__name__)

# what differs between layouts of one run; everything else in a config must be equal
_PER_LAYOUT = ("rank", "world_size", "num_workers", "batch_size", "canonical_layout")


def canonical_for(
    option: Any,
    wc: WorkerConfig,
    batch_size: int | None,
    task_encoder: TaskEncoder | None,
    bucket_sync: Any = None,
) -> CanonicalLayout | None:
    """``get_train_dataset(canonical_layout=...)`` checked, as a layout (None: this layout
    defines the batches, as without the option). Logs which guarantee this layout gives."""
    if option is None:
        return None
    if (
        not isinstance(option, (tuple, list))
        or len(option) != 2
        or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in option)
    ):
        raise ConfigError(
            f"canonical_layout={short_repr(option)} must be (ranks, workers), two integers >= 1"
        )
    layout = CanonicalLayout(int(option[0]), int(option[1]))
    here = f"{wc.world_size} ranks x {wc.num_workers} workers"
    if not layout.reproduced_by(wc.world_size, wc.num_workers):
        log.warning(
            "canonical_layout=(%d, %d) on %s, which do not divide it: this run delivers every "
            "sample exactly once, in an order of its own layout; a layout whose ranks divide "
            "%d and whose workers (0 counts as 1) divide %d gives the canonical global batches",
            layout.ranks, layout.workers, here, layout.ranks, layout.workers,
        )  # fmt: skip
        return layout
    per_phase = layout.ranks // wc.world_size
    te = task_encoder if task_encoder is not None else DefaultTaskEncoder()
    grouped = te.overrides("batch_group_criterion")
    if batch_size is None and not grouped:
        raise ConfigError(
            f"canonical_layout={tuple(option)} needs batching (a batch_size, or a "
            "batch_group_criterion): a step is one batch of every canonical rank"
        )
    if batch_size is not None and not grouped and batch_size % per_phase:
        raise ConfigError(
            f"canonical_layout={tuple(option)} on {wc.world_size} ranks: batch_size="
            f"{batch_size} per rank is a global batch of {batch_size * wc.world_size}, which "
            f"{layout.ranks} canonical ranks cannot share evenly; use a batch_size that is a "
            f"multiple of {per_phase} (keep world_size x batch_size, a multiple of {layout.ranks})"
        )
    if grouped and per_phase > 1 and not bucket_sync:
        raise ConfigError(
            f"canonical_layout={tuple(option)} on {wc.world_size} ranks joins {per_phase} "
            "canonical ranks' batches into one, so their buckets must agree at every step: "
            "set bucket_sync={'weights': {bucket: weight}} with batch_group_criterion"
        )
    log.info(
        "canonical_layout=(%d, %d) on %s: the global batches are the canonical layout's "
        "(each worker runs %d of its %d logical pipelines)",
        layout.ranks, layout.workers, here,
        per_phase * (layout.workers // wc.workers_per_rank), layout.ranks * layout.workers,
    )  # fmt: skip
    return layout


@dataclass
class Logical:
    """A run's position as its canonical pipelines: what any reproducing layout restores."""

    layout: CanonicalLayout
    pipelines: list[Any]  # by logical id k * Q + q; None: not started
    phase: int  # the canonical phase of the next step
    config: dict[str, Any]  # the old rank 0's config
    epoch: int
    in_pass: int
    paths: Any


def relayout(
    states: list[Any], dataset: SavableDataset, leaves: list[LeafPlan] | None
) -> list[dict[str, Any]] | None:
    """Every rank's state for this loader's layout, or None where neither the old states
    nor this loader have a canonical layout (the plain paths apply)."""
    from energon_lite.stages.elastic import _check_old, check_ownership, redistribute

    wc = dataset.worker_config
    pipeline = dataset.pipeline
    layout = pipeline.canonical(wc.slot(0))
    old_canonical = any(
        isinstance(s, dict) and isinstance(s.get("config"), dict) and "canonical_layout" in s["config"]
        for s in states
    )  # fmt: skip
    if layout is None and not old_canonical:
        return None
    current = dataset.config()
    shape = pipeline.state_shape(wc.slot(0))  # the chain above the pipelines (encode_batch)
    config, epoch = _check_old(states)
    _check_settings(config, current, wc)
    logical = _logical(states, config, epoch)
    if logical is None:  # plain chains of a layout that did not reproduce its canonical one
        if layout is None:
            return None
        logical = _redistributed(states, layout, leaves)
    if layout is None:  # this layout does not reproduce a canonical one: its own chains
        _warn_fallback(logical.layout, wc)
        moved = redistribute(_expanded(logical, current), wc.world_size, wc.num_workers)
        return [_with_config(state, current, shape) for state in moved]
    if logical.layout != layout:
        _warn_fallback(logical.layout, wc)
        logical = _redistributed(_expanded(logical, current), layout, leaves)
    else:
        check_ownership(_expanded(logical, current, digest=False), leaves)
    return _physical(logical, wc, current, shape)


def pipeline_trees(workers: list[Any], wc: WorkerConfig, layout: CanonicalLayout) -> list[Any]:
    """A rank's worker states as the canonical layout's K ranks of Q pipelines (the plain
    form the ownership check reads: pipeline k * Q + q is worker q of rank k), this rank's
    pipelines in their places and None elsewhere."""
    pipelines: list[Any] = [None] * (layout.ranks * layout.workers)
    for worker, level in enumerate(workers):
        if level is None:
            continue
        sources, _ = read_phases_level(stateless_removed(level), f"worker {worker}")
        slots = layout.slots(WorkerSlot(wc.rank, wc.world_size, worker, wc.workers_per_rank, 0))
        for slot, source in zip(slots, sources):
            pipelines[slot.rank * layout.workers + slot.worker_id] = source
    return [
        {"config": {"rank": k}, "workers": pipelines[k * layout.workers : (k + 1) * layout.workers]}
        for k in range(layout.ranks)
    ]


def _check_settings(old: dict[str, Any], current: dict[str, Any], wc: WorkerConfig) -> None:
    """The settings other than the layout must match, and the global batch size."""
    check_same_config(
        {**old, **{key: current[key] for key in _PER_LAYOUT if key in current}}, current
    )
    old_size, new_size = old.get("batch_size"), current.get("batch_size")
    old_global = None if old_size is None else old_size * old["world_size"]
    new_global = None if new_size is None else new_size * wc.world_size
    if old_global != new_global:
        raise StateError(
            f"loader state has a global batch of {old_size} per rank x {old['world_size']} "
            f"ranks = {old_global}, this loader {new_size} x {wc.world_size} = {new_global}; "
            f"build this layout's loaders with batch_size = {old_global} / ranks"
        )


def _warn_fallback(old: CanonicalLayout, wc: WorkerConfig) -> None:
    log.warning(
        "restoring states of canonical layout (%d, %d) on %d ranks x %d workers of another "
        "canonical layout or none: the rest of the epoch is delivered exactly once, in "
        "another order than the old run's",
        old.ranks, old.workers, wc.world_size, wc.num_workers,
    )  # fmt: skip


def _logical(states: list[Any], config: dict[str, Any], epoch: int) -> Logical | None:
    """The old states (checked together: ``config`` and ``epoch`` are theirs) as canonical
    pipelines; None for plain chains of a layout that did not reproduce its canonical one."""
    ranks, workers = config["world_size"], max(1, int(config["num_workers"]))
    saved = config.get("canonical_layout")
    layout = CanonicalLayout(*saved) if saved is not None else CanonicalLayout(ranks, workers)
    if saved is not None and not layout.reproduced_by(ranks, config["num_workers"]):
        return None
    pipelines: list[Any] = [None] * (layout.ranks * layout.workers)
    phases = {}
    for rank, state in enumerate(states):
        next_worker = state.get("next_worker")
        if not isinstance(next_worker, int) or not 0 <= next_worker < workers:
            raise StateError(f"old rank {rank}: next_worker={short_repr(next_worker)} is corrupt")
        for worker, level in enumerate(state["workers"]):
            level = stateless_removed(level)
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
        epoch,
        max(int(s.get("in_pass") or 0) for s in states),
        states[0].get("paths"),
    )


def _expanded(
    logical: Logical, current: dict[str, Any], digest: bool = True
) -> list[dict[str, Any]]:
    """The pipelines as the plain states of K ranks x Q workers (what the elastic checks and
    redistribution read): pipeline k * Q + q is worker q of rank k. ``digest=False`` for
    the ownership check alone, which does not read digests."""
    layout = logical.layout
    config = {key: value for key, value in logical.config.items() if key != "canonical_layout"}
    size = current.get("batch_size")  # buffers hold keys, not batches: any batch size deals
    out = []
    for rank in range(layout.ranks):
        state = {
            "type": "SavableLoader",
            "version": STATE_VERSION,
            "config": {
                **config,
                "rank": rank,
                "world_size": layout.ranks,
                "num_workers": layout.workers,
                "batch_size": size,
            },
            "epoch": logical.epoch,
            "next_worker": logical.phase,
            "workers": logical.pipelines[rank * layout.workers : (rank + 1) * layout.workers],
            "in_pass": logical.in_pass,
        }
        if digest:
            state["digest"] = state_digest(state)
        out.append(state)
    return out


def _redistributed(plain: list[Any], layout: CanonicalLayout, leaves: Any) -> Logical:
    """Plain states of any layout dealt exactly once onto ``layout``'s pipelines."""
    from energon_lite.stages.elastic import check_ownership, redistribute

    check_ownership(plain, leaves)
    moved = redistribute(plain, layout.ranks, layout.workers)
    return Logical(
        layout,
        [stateless_removed(level) for state in moved for level in state["workers"]],
        0,
        moved[0]["config"],
        moved[0]["epoch"],
        0,
        plain[0].get("paths") if isinstance(plain[0], dict) else None,
    )


def _with_config(
    state: dict[str, Any], current: dict[str, Any], shape: dict[str, Any]
) -> dict[str, Any]:
    """A redistributed plain state with this loader's config (and chain ``shape``)."""
    out = {
        **state,
        "config": {**current, "rank": state["config"]["rank"]},
        "workers": [stateless_added(shape, stateless_removed(w)) for w in state["workers"]],
    }
    out.pop("digest", None)
    out["digest"] = state_digest(out)
    return out


def _physical(
    logical: Logical, wc: WorkerConfig, current: dict[str, Any], shape: dict[str, Any]
) -> list[dict[str, Any]]:
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
        state = {
            "type": "SavableLoader",
            "version": STATE_VERSION,
            "config": {**current, "rank": rank},
            "epoch": logical.epoch,
            "next_worker": phase % workers,
            "workers": levels,
            "in_pass": logical.in_pass,
        }
        if logical.paths is not None:
            state["paths"] = logical.paths
        state["digest"] = state_digest(state)
        out.append(state)
    return out
