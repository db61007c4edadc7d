"""Restoring: a saved rank state, or every rank's, turned into this rank's checked position.

``SavableLoader.restore_state_rank(state)`` is :func:`restore_rank`: the record checked on
its own (:meth:`RankState.read`), against the loader (the same configuration, the
micro-batch size aside where it may change: :mod:`.config_match`; a batch count inside the
pass; every worker chain of the declared shape), then the workers owning their work once
(:func:`check_owned`, last: it reads only states of the declared shape).
``restore_state_global(states)`` is :func:`restore_global`, one straight line read top to
bottom, each module entered once: every rank's state read together (:func:`read_run`, or an
Energon run dealt to this layout), the run's configuration checked once
(:func:`check_run_config`), how it moves where a canonical layout is involved
(:func:`move_of`), the old states checked to own their work once as a whole run, then moved
(elastic redistribution, canonical relayout, or as saved), and this rank's position, its
chains' shape last. The loader hands the states down once and gets back its new
:class:`Position`. Nothing here builds a chain: each worker restores its own from its
state, and every stage checks its own fields (``Stage._validate``); what a saved level
holds, each stage class says, asked through the loader's table of them
(``RestoreTarget.stages``). A state saved by Megatron-Energon 7.x is recognised in both and
continued (:mod:`energon_lite.resume.energon_state`).
"""

from __future__ import annotations

from typing import Any

from energon_lite.errors import StateError
from energon_lite.resume.config_match import check_fits, check_run_config
from energon_lite.resume.elastic import redistributed
from energon_lite.resume.energon_import import is_energon_state, read_energon_state
from energon_lite.resume.energon_state import energon_rank_states
from energon_lite.resume.ownership import check_each_rank, check_ownership
from energon_lite.resume.position import Position
from energon_lite.resume.rank_state import RankState, SavedRun, read_run
from energon_lite.resume.relayout import move_of, pipeline_trees, relayout
from energon_lite.resume.target import RestoreTarget
from energon_lite.state.codec import check_state_shape


def restore_rank(state: Any, target: RestoreTarget) -> Position:
    """``state`` (from ``save_state_rank``, ours or Energon's) checked for the ``target``
    loader."""
    if is_energon_state(state):
        plain = read_energon_state(state)
        mine = energon_rank_states(plain, target)[target.worker_config.rank]
    else:
        mine = RankState.read(state)
    check_fits(mine.config, mine.paths, target.config, target.paths)
    position = Position.of(mine)
    for worker, chain in enumerate(mine.workers):
        if chain is not None:
            slot = target.worker_config.slot(worker, mine.epoch)
            check_state_shape(target.shape(slot), chain)
    limit = target.batches_per_pass
    if limit is not None and mine.in_pass > limit:
        raise StateError(f"loader state in_pass={mine.in_pass} is not a batch count")
    check_owned(mine, target)
    return position


def restore_global(states: Any, target: RestoreTarget, src_rank: int | None = None) -> Position:
    """This rank's position from every rank's state (``save_state_global``), saved on this
    layout or another. With ``src_rank`` in a process group, only that rank needs the
    states: it moves them to this layout and sends each rank its own.

    Read top to bottom, each step once: every rank's state read (ours, or Energon's dealt to
    this layout), its configuration checked against this loader, the old states checked to
    own their work once as a whole run and moved to this layout (as saved, canonical
    relayout or elastic redistribution), then this rank's position, its chains' shape last."""
    import torch.distributed as dist

    wc = target.worker_config
    scattered = src_rank is not None and dist.is_available() and dist.is_initialized()
    moved: list[RankState] | None = None
    if not scattered or dist.get_rank() == src_rank:  # src moves the states for all ranks
        if not isinstance(states, list) or not states:
            raise StateError(
                f"restore_state_global needs one state per rank ({wc.world_size}), got "
                f"{None if states is None else len(states) if isinstance(states, list) else states}"
            )
        energon = is_energon_state(states)
        if energon:  # dealt to this layout: a run saved on it
            plain = read_energon_state(states)
            made = energon_rank_states(plain, target)
            run = SavedRun(made, made[0].config, 0)
        else:
            run = read_run(states)
            check_run_config(run.config, run.paths, target.config, target.paths)
        move = None  # where it or this loader has a canonical layout: how it moves
        if not energon and (target.canonical is not None or "canonical_layout" in run.config):
            move = move_of(run, target)
        old = run if move is None else move.old
        onto = None if move is None else move.onto
        leaves = target.leaves() if move is None or move.with_plan else None
        if move is None and (run.config.get("world_size"), run.config.get("num_workers")) != (
            wc.world_size,
            wc.num_workers,
        ):
            onto = (wc.world_size, wc.num_workers)  # redistributed over this layout
        if move is None and onto is None and leaves is None:
            check_each_rank(old.ranks, wc.world_size, target.stages)  # a chain composed by hand
        else:  # every rank's together: each rank's own checks cannot see overlaps
            check_ownership(old.ranks, target.stages, leaves)
        moved = old.ranks if onto is None else redistributed(old, *onto, target.stages)
        if move is not None:
            moved = relayout(move, moved, target)
    if scattered:
        received: list[Any] = [None]
        sent = None if moved is None else [state.plain() for state in moved]
        dist.scatter_object_list(received, sent, src=src_rank, group=wc.data_parallel_group)
        mine = RankState.read(received[0])
        check_fits(mine.config, mine.paths, target.config, target.paths)
    else:
        assert moved is not None
        if len(moved) != wc.world_size:
            raise StateError(
                f"restore_state_global needs one state per rank ({wc.world_size}), got {len(moved)}"
            )
        mine = moved[wc.rank]
    position = Position.of(mine)
    for worker, chain in enumerate(mine.workers):  # state/: the line's last call
        if chain is not None:
            slot = wc.slot(worker, mine.epoch)
            check_state_shape(target.shape(slot), chain)
    limit = target.batches_per_pass
    if limit is not None and mine.in_pass > limit:
        raise StateError(f"loader state in_pass={mine.in_pass} is not a batch count")
    return position


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
