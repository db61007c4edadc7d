"""Restoring: a saved rank state, or every rank's, turned into this rank's checked position.

``SavableLoader.restore_state_rank(state)`` is :func:`restore_rank`: the record checked on
its own (:meth:`RankState.read`), against the loader (:func:`checked_for`: the same
configuration, the micro-batch size aside where it may change (:mod:`.micro_batch`), every
worker chain of the declared shape, a batch count inside the pass), then the workers owning
their work once (:func:`check_owned`, last: it reads only states of the declared shape).
``restore_state_global(states)`` is :func:`restore_global`, read top to bottom: every rank's
state read together (:func:`read_run`), moved to this layout where it was saved on another
(:func:`for_this_layout`: canonical relayout or elastic redistribution; the old states are
checked to own their work once, as a whole run, before they move), then this rank's checked
against the loader (:func:`checked_for`, the shape last). The loader hands the states down
once and gets back its new :class:`Position`. Nothing here builds a chain: each worker
restores its own from its state, and every stage checks its own fields
(``Stage._validate``); what a saved level holds, each stage class says, asked through the
loader's table of them (``RestoreTarget.stages``). A state saved by Megatron-Energon 7.x is
recognised in both and continued (:mod:`energon_lite.resume.energon_state`).
"""

from __future__ import annotations

from typing import Any

from energon_lite.errors import StateError
from energon_lite.resume.elastic import redistributed
from energon_lite.resume.energon_state import energon_rank_states
from energon_lite.resume.micro_batch import comparable_config, refusal
from energon_lite.resume.ownership import check_each_rank, check_ownership
from energon_lite.resume.position import Position
from energon_lite.resume.rank_state import RankState, check_same_config, read_run
from energon_lite.resume.relayout import pipeline_trees, relayout
from energon_lite.resume.target import RestoreTarget
from energon_lite.state.codec import check_state_shape
from energon_lite.state.energon_import import is_energon_state, read_energon_state


def restore_rank(state: Any, target: RestoreTarget) -> Position:
    """``state`` (from ``save_state_rank``, ours or Energon's) checked for the ``target``
    loader."""
    if is_energon_state(state):
        plain = read_energon_state(state)
        mine = energon_rank_states(plain, target)[target.worker_config.rank]
    else:
        mine = RankState.read(state)
    position = checked_for(mine, target)
    check_owned(mine, target)
    return position


def restore_global(states: Any, target: RestoreTarget, src_rank: int | None = None) -> Position:
    """This rank's position from every rank's state (``save_state_global``), saved on this
    layout or another. With ``src_rank`` in a process group, only that rank needs the
    states: it moves them to this layout and sends each rank its own."""
    mine = this_rank(states, target, src_rank)
    return checked_for(mine, target)


def this_rank(states: Any, target: RestoreTarget, src_rank: int | None) -> RankState:
    """This rank's state of the run ``states`` moved to the ``target`` loader's layout."""
    import torch.distributed as dist

    wc = target.worker_config
    if src_rank is not None and dist.is_available() and dist.is_initialized():
        received: list[Any] = [None]
        sent = None
        if dist.get_rank() == src_rank:  # another layout: src moves the states for all ranks
            sent = [state.plain() for state in for_this_layout(states, target)]
        dist.scatter_object_list(received, sent, src=src_rank, group=wc.data_parallel_group)
        return RankState.read(received[0])
    moved = for_this_layout(states, target)
    if len(moved) != wc.world_size:
        raise StateError(
            f"restore_state_global needs one state per rank ({wc.world_size}), got {len(moved)}"
        )
    return moved[wc.rank]


def for_this_layout(states: Any, target: RestoreTarget) -> list[RankState]:
    """Every rank's state for the ``target`` loader's layout: as saved, or moved when it
    was saved with another number of ranks or workers or canonical layout. The states
    are checked to own their work once as a whole run where the dataset's plan is at hand
    (each rank alone where it is not: a chain composed by hand)."""
    wc = target.worker_config
    if not isinstance(states, list) or not states:
        raise StateError(
            f"restore_state_global needs one state per rank ({wc.world_size}), got "
            f"{None if states is None else len(states) if isinstance(states, list) else states}"
        )
    if is_energon_state(states):
        plain = read_energon_state(states)
        made = energon_rank_states(plain, target)
        check_ownership(made, target.stages, target.leaves())
        return made
    run = read_run(states)
    saved = run.config
    if target.canonical is not None or "canonical_layout" in saved:
        moved = relayout(run, target)  # a canonical layout's run (None: plain chains after all)
        if moved is not None:
            return moved
    if (saved.get("world_size"), saved.get("num_workers")) == (wc.world_size, wc.num_workers):
        leaves = target.leaves()
        if leaves is None:  # a chain composed by hand: each rank's workers together
            check_each_rank(run.ranks, wc.world_size, target.stages)
        else:  # every rank's together: each rank's own checks cannot see overlaps
            check_ownership(run.ranks, target.stages, leaves)
        return run.ranks
    classes, config, leaves = target.stages, target.config, target.leaves()
    return redistributed(run, wc.world_size, wc.num_workers, classes, config, leaves)


def checked_for(state: RankState, target: RestoreTarget) -> Position:
    """The position ``state`` records, if the ``target`` loader can continue it: the same
    configuration, every worker chain of the declared shape (the values are checked when a
    worker restores) and a batch count inside the pass."""
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
    return Position(list(state.workers), state.next_worker, state.epoch, state.in_pass)


def check_owned(state: RankState, target: RestoreTarget) -> None:
    """StateError unless a rank's workers together own their work once (no sample
    buffered twice, in one buffer or two workers', no slice open twice, every reader
    position inside the plan): what a restore of one rank checks last, and what healing
    checks of the states received before it restarts workers. A canonical layout's rank is
    read as its logical pipelines, each at its canonical global worker."""
    wc, layout, classes = target.worker_config, target.canonical, target.stages
    if layout is None:
        check_each_rank([state], wc.world_size, classes, target.leaves())
    else:
        check_ownership(
            pipeline_trees(state.workers, wc, layout, classes), classes, target.leaves()
        )


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
