"""The rank state: one rank's saved loader position, as one typed record.

What ``SavableLoader.save_state_rank()`` returns is this record as plain data (msgpack-,
pickle-, JSON- and ``torch.save``-able), version 2::

    {"type": "SavableLoader", "version": 2,
     "config": <dataset.config(): what a state must match, with rank, world_size, num_workers>,
     "epoch": <the loader's pass>, "next_worker": <the worker polled next>,
     "workers": [<a worker's chain state, or None before its first batch>, ...],
     "in_pass": <batches handed out in this pass>,
     "paths": [<where the datasets were read from; for messages only>],
     "digest": <state_digest of everything else>}

A rank of a canonical layout saves its pipelines in compact form, version 3
(:mod:`energon_lite.state.compact`); reading unpacks it and upgrades an older form to
today's first (:mod:`energon_lite.state.upgrade`). :class:`RankState` is the only
place that writes this form (:meth:`RankState.plain`) and the only place that checks it
(:meth:`RankState.read`: type, version, digest, and the fields' own consistency);
:func:`read_run` checks the states of every rank of one run together (rank order, one state
per rank, one configuration, one pass). What a state must match in the loader that restores
it (its configuration, its chains' declared shape) is :mod:`energon_lite.resume.restore`.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from energon_lite.errors import StateError, short_repr
from energon_lite.resume.config_match import check_same_config
from energon_lite.resume.levels import walk_states
from energon_lite.stages.base import stage_class
from energon_lite.state.codec import STATE_VERSION, state_digest
from energon_lite.state.compact import packed, unpacked
from energon_lite.state.upgrade import LOADER_TYPE, upgrade_state


@dataclass(frozen=True)
class RankState:
    """One rank's position: per worker the state of the last batch the trainer received,
    the worker polled next, the pass and the batches handed out in it."""

    config: dict[str, Any]  # the dataset's config plus rank, world_size and num_workers
    epoch: int
    next_worker: int
    workers: list[Any]  # a chain state (a tree of stage levels) or None, per worker
    in_pass: int
    paths: list[str] | None = None  # where the datasets were read from (messages only)

    @property
    def rank(self) -> Any:
        return self.config.get("rank")

    @cached_property
    def levels(self) -> list[list[dict[str, Any]]]:
        """Per worker the stage levels of its chain state (:func:`walk_states`), walked once:
        what the checks and moves of a run read level by level."""
        return [list(walk_states(tree)) for tree in self.workers]

    def plain(self) -> dict[str, Any]:
        """The saved form, version 2, with its digest."""
        state: dict[str, Any] = {
            "type": LOADER_TYPE,
            "version": STATE_VERSION,
            "config": self.config,
            "epoch": self.epoch,
            "next_worker": self.next_worker,
            "workers": self.workers,
            "in_pass": self.in_pass,
        }
        if self.paths is not None:
            state["paths"] = self.paths
        state["digest"] = state_digest(state)
        return state

    def saved(self) -> dict[str, Any]:
        """What ``save_state_rank()`` hands out: the caller's own copy (the trainer's worker
        states share what did not change from one batch to the next,
        :mod:`energon_lite.resume.state_delta`, so a caller that edits what it got must not
        edit the states saved after it), a canonical layout's pipelines compact."""
        state = pickle.loads(pickle.dumps(self.plain(), pickle.HIGHEST_PROTOCOL))
        return packed(state, _many_pipelines)

    @classmethod
    def read(cls, state: Any, where: str = "") -> RankState:
        """``state`` (from ``save_state_rank``, either version) checked as a record of its
        own; StateError naming what is wrong, prefixed by ``where`` ("old rank 1: ")."""
        if not isinstance(state, dict) or state.get("type") != LOADER_TYPE:
            raise StateError(f"{where}not an energon_lite loader state: {short_repr(state)}")
        try:  # version 3 (compact pipelines) unpacked, and any older form upgraded
            state = upgrade_state(unpacked(state))
        except StateError as exc:
            raise StateError(f"{where}{exc}") from None
        if state.get("digest") != state_digest(state):
            raise StateError(
                f"{where}loader state does not match its digest: it was edited or corrupted "
                "after save_state_rank(); refusing it rather than changing the data stream"
            )
        config = state.get("config")
        if not isinstance(config, dict):
            raise StateError(
                f"{where}loader state has no config dict (got {type(config).__name__}); corrupt"
            )
        declared = config.get("num_workers")
        if isinstance(declared, bool) or not isinstance(declared, int) or declared < 0:
            raise StateError(f"{where}loader state num_workers={short_repr(declared)} is corrupt")
        n = max(1, declared)
        workers = state.get("workers")
        if not isinstance(workers, list) or len(workers) != n:
            raise StateError(
                f"{where}loader state has "
                f"{len(workers) if isinstance(workers, list) else 'no'} worker states, expected {n}"
            )
        next_worker = state.get("next_worker")
        if not isinstance(next_worker, int) or not 0 <= next_worker < n:
            raise StateError(f"{where}loader state next_worker={next_worker!r} outside [0, {n})")
        epoch = state.get("epoch", 0)
        if not isinstance(epoch, int) or epoch < 0:
            raise StateError(
                f"{where}loader state epoch={epoch!r} is not a pass number; it is corrupt"
            )
        in_pass = state.get("in_pass")
        if isinstance(in_pass, bool) or not isinstance(in_pass, int) or in_pass < 0:
            raise StateError(
                f"{where}loader state in_pass={short_repr(in_pass)} is not a batch count"
            )
        paths = state.get("paths")
        return cls(config, epoch, next_worker, workers, in_pass, paths)


@dataclass(frozen=True)
class SavedRun:
    """Every rank's state of one run at one step, checked together (:func:`read_run`)."""

    ranks: list[RankState]  # by rank
    config: dict[str, Any]  # rank 0's config
    epoch: int  # the pass every rank is in

    @property
    def paths(self) -> list[str] | None:
        return self.ranks[0].paths


def read_run(states: Any) -> SavedRun:
    """The states of every rank of one run (``save_state_global``), each checked as a
    record (:meth:`RankState.read`) and together: in rank order, one per rank, of one
    configuration, in one pass."""
    if not isinstance(states, list) or not states:
        raise StateError(
            f"restoring a run needs the list of every old rank's state, got {short_repr(states)}"
        )
    ranks = [RankState.read(state, f"old rank {rank}: ") for rank, state in enumerate(states)]
    first = ranks[0].config
    for rank, state in enumerate(ranks):
        if state.rank != rank:
            raise StateError(
                f"old rank {rank}: the state is rank {short_repr(state.rank)}'s; "
                "pass the states in rank order, one per old rank"
            )
        if state.config.get("world_size") != len(states):
            raise StateError(
                f"old rank {rank}: saved with world_size={state.config.get('world_size')}, "
                f"but {len(states)} states were given; pass every old rank's state"
            )
        check_same_config({**state.config, "rank": 0}, {**first, "rank": 0})
    epochs = sorted({state.epoch for state in ranks})
    if len(epochs) != 1:
        raise StateError(
            f"the old ranks are in different passes {epochs}; save every rank at the "
            "same step (save_state_global)"
        )
    return SavedRun(ranks, first, epochs[0])


def _many_pipelines(level: dict[str, Any]) -> bool:
    """A saved level whose parents are a canonical layout's pipelines (``Phases``)."""
    cls = stage_class(level.get("type"))
    return cls is not None and cls.LAZY_SOURCES
