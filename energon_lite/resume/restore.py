"""Restoring: a saved rank state, or every rank's, turned into this rank's checked position.

``SavableLoader.restore_state_rank(state)`` is :func:`restore_rank`: the record checked on
its own (:meth:`RankState.read`) and against the loader (:func:`checked_for`: the same
configuration, the micro-batch size aside where it may change (:mod:`.micro_batch`), every worker chain of the declared shape, a batch count inside the pass, the
workers owning their work once, :func:`check_owned`).
``restore_state_global(states)`` is :func:`restore_global`: every rank's state read together
(:func:`read_run`) and, where they were saved on another layout, moved to this one
(:func:`for_this_layout`: canonical relayout or elastic redistribution), then this rank's
checked as above. The loader hands the states down once and gets back its new
:class:`Position`. Nothing here builds a chain: each worker restores its own from its
state, and every stage checks its own fields (``Stage._validate``). A state saved by
Megatron-Energon 7.x is recognised in both and continued
(:mod:`energon_lite.resume.energon_state`).
"""

from __future__ import annotations

from typing import Any

from energon_lite.errors import StateError
from energon_lite.resume.elastic import redistributed
from energon_lite.resume.energon_state import energon_rank_states
from energon_lite.resume.micro_batch import comparable_config, refusal
from energon_lite.resume.ownership import check_ownership
from energon_lite.resume.position import Position
from energon_lite.resume.rank_state import RankState, SavedRun, check_same_config, read_run
from energon_lite.resume.relayout import pipeline_trees, relayout
from energon_lite.resume.target import RestoreTarget
from energon_lite.state.codec import check_state_shape
from energon_lite.state.energon_import import is_energon_state


def restore_rank(state: Any, target: RestoreTarget) -> Position:
    """``state`` (from ``save_state_rank``, ours or Energon's) checked for the ``target``
    loader."""
    if is_energon_state(state):
        return checked_for(energon_rank_states(state, target)[target.worker_config.rank], target)
    return checked_for(RankState.read(state), target)


def restore_global(states: Any, target: RestoreTarget, src_rank: int | None = None) -> Position:
    """This rank's position from every rank's state (``save_state_global``), saved on this
    layout or another. With ``src_rank`` in a process group, only that rank needs the
    states: it moves them to this layout and sends each rank its own."""
    import torch.distributed as dist

    if src_rank is not None and dist.is_available() and dist.is_initialized():
        received: list[Any] = [None]
        sent = None
        if dist.get_rank() == src_rank:  # another layout: src moves the states for all ranks
            sent = [state.plain() for state in for_this_layout(states, target)]
        group = target.worker_config.data_parallel_group
        dist.scatter_object_list(received, sent, src=src_rank, group=group)
        return restore_rank(received[0], target)
    return restore_run(states, target)


def restore_run(states: Any, target: RestoreTarget) -> Position:
    """This rank's position from every rank's state, all given here."""
    wc = target.worker_config
    moved = for_this_layout(states, target)
    if len(moved) != wc.world_size:
        raise StateError(
            f"restore_state_global needs one state per rank ({wc.world_size}), got {len(moved)}"
        )
    return checked_for(moved[wc.rank], target)


def for_this_layout(states: Any, target: RestoreTarget) -> list[RankState]:
    """Every rank's state for the ``target`` loader's layout: as saved, or moved when it
    was saved with another number of ranks or workers or canonical layout."""
    wc = target.worker_config
    if not isinstance(states, list) or not states:
        raise StateError(
            f"restore_state_global needs one state per rank ({wc.world_size}), got "
            f"{None if states is None else len(states) if isinstance(states, list) else states}"
        )
    if is_energon_state(states):
        return energon_rank_states(states, target)
    run = read_run(states)
    moved = relayout(run, target)  # a canonical layout's run
    if moved is not None:
        return moved
    if _saved_on(run, wc.world_size, wc.num_workers):
        leaves = target.leaves()
        if leaves is not None:  # each rank's own checks cannot see overlaps
            check_ownership(run.ranks, target.stages, leaves)
        return run.ranks
    classes, config, leaves = target.stages, target.config, target.leaves()
    return redistributed(run, wc.world_size, wc.num_workers, classes, config, leaves)


def checked_for(state: RankState, target: RestoreTarget) -> Position:
    """The position ``state`` records, if the ``target`` loader can continue it: the same
    configuration, every worker chain of the declared shape (the values are checked when a
    worker restores), a batch count inside the pass, then the workers owning their work once
    (a check that reads only states of the declared shape)."""
    try:
        check_same_config(state.config, comparable_config(state.config, target.config))
    except StateError as exc:
        raise StateError(f"{exc}{_mismatch_hint(state, target)}") from None
    for worker, chain in enumerate(state.workers):
        if chain is not None:
            slot = target.worker_config.slot(worker, state.epoch)
            check_state_shape(target.shape(slot), chain)
    limit = target.batches_per_pass
    if limit is not None and state.in_pass > limit:
        raise StateError(f"loader state in_pass={state.in_pass} is not a batch count")
    check_owned(state, target)
    return Position(list(state.workers), state.next_worker, state.epoch, state.in_pass)


def check_owned(state: RankState, target: RestoreTarget) -> None:
    """StateError unless the rank's workers together own their work once (no sample
    buffered twice, in one buffer or two workers', no slice open twice, every reader
    position inside the plan): what every restore of a rank checks last, and what healing
    checks of the states received before it restarts workers. A canonical layout's rank is
    read as its logical pipelines, each at its canonical global worker."""
    wc, layout, classes = target.worker_config, target.canonical, target.stages
    if layout is not None:
        ranks = pipeline_trees(state.workers, wc, layout, classes)
    else:  # the other ranks' places empty: each worker is checked as its global worker
        empty = [None] * wc.workers_per_rank
        ranks = [
            RankState({"rank": k}, 0, 0, state.workers if k == wc.rank else empty, 0)
            for k in range(wc.world_size)
        ]
    check_ownership(ranks, classes, target.leaves())


def _saved_on(run: SavedRun, world_size: int, num_workers: int) -> bool:
    """Whether the run's states were saved with this layout."""
    config = run.config
    return config.get("world_size") == world_size and config.get("num_workers") == num_workers


def _mismatch_hint(state: RankState, target: RestoreTarget) -> str:
    """What to do about a state saved by another loader (a sentence, or "")."""
    saved, current = state.config, target.config
    hints = []
    if "datasets" in current and saved.get("datasets") != current["datasets"]:
        paths = state.paths
        where = (
            ", ".join(str(p) for p in paths[:8])
            if isinstance(paths, list) and paths
            else "paths not recorded in this state"
        )
        hints.append(
            f"the state was saved reading {where}; this loader reads "
            f"{', '.join(target.paths)}, whose content differs"
        )
    why = refusal(saved, current)
    if why is not None:
        hints.append(f"the batch size cannot change here: {why}")
    if any(saved.get(k) != current.get(k) for k in ("num_workers", "world_size")):
        hints.append(
            "to resume on another number of ranks or workers, give every rank's state to "
            "loader.restore_state_global(states) (or run energon-lite checkpoint redist)"
        )
    return "".join(f". {hint[0].upper()}{hint[1:]}" for hint in hints)
