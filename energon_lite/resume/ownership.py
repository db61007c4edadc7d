"""The check that a run's saved states, taken together, own their work once.

Each rank's state passes its own checks when restored alone; an edit made consistently in
two states (the digest recomputed, as anyone holding the files can) passes those and would
repeat or lose samples. :func:`check_ownership` reads every old rank's state together: no
sample buffered twice, no slice of a reader epoch open twice, and (with the dataset's plan
per leaf, :class:`LeafPlan`) every reader position inside the epoch's plan.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from energon_lite.errors import StateError, short_repr
from energon_lite.quotas import next_past_end
from energon_lite.resume.levels import StageClasses, holds_sub_key
from energon_lite.resume.rank_state import RankState
from energon_lite.stages.reader import Reader
from energon_lite.stages.slices import DEALINGS, SliceTable
from energon_lite.state.restore_key import from_plain, sample_keys, to_plain

_READER = Reader.__name__


class LeafPlan(NamedTuple):
    """What the dataset says about one leaf's epoch, for :func:`check_ownership`."""

    slices: int  # slice positions per reader epoch
    once: bool  # each slice at most once per epoch (no shuffle_over_epochs_multiplier != 1)
    # why an open [slice, position] is outside the leaf (Reader.open_slice_error), or None
    open_error: Callable[[int, int], str | None] | None = None
    # the leaf's slices under a dealing for a number of global workers (Reader.table): the
    # plan of a state's own dealing and layout; where given, it decides over the fields above
    table: Callable[[str, int], SliceTable] | None = None

    @classmethod
    def of(cls, reader: Reader) -> LeafPlan:
        """A Reader's plan: the rules its own restore applies."""
        return cls(reader.num_slices, reader.slices_once(), reader.open_slice_error, reader.table)


NO_PLAN_HINT = (
    " (a leaf with shuffle_over_epochs_multiplier other than 1 may deal a slice twice in one "
    "epoch: if the dataset has one, give the dataset so that this is checked per leaf, e.g. "
    "energon-lite checkpoint redist --dataset PATH)"
)


def check_ownership(
    states: Sequence[RankState], classes: StageClasses, leaves: list[LeafPlan] | None = None
) -> None:
    """StateError unless the old states, taken together, own their work once: no sample is
    buffered twice (in two old workers, or twice in one), no slice of a reader epoch is open
    twice, and with ``leaves`` (the dataset's plan per leaf) every Reader ``next`` and open
    slice is inside the epoch's plan; ``classes`` say what each level buffers
    (``held_keys``). Each state passes its own checks when restored alone;
    an edit made consistently in two states (the digest recomputed, as anyone holding the
    files can) passes those and would repeat or lose samples.

    Without ``leaves`` every leaf is taken to deal each slice once per epoch (the default).
    Shapes are checked by the restore itself; this only reads what has the expected shape."""
    trees = [
        (rank, worker, levels)
        for rank, state in enumerate(states)
        for worker, levels in enumerate(state.levels)
    ]
    hint = NO_PLAN_HINT if leaves is None else ""
    keys: dict[Any, tuple[int, int, Any]] = {}
    slices: dict[tuple[int, int, int], tuple[int, int]] = {}
    for g, (rank, worker, levels) in enumerate(trees):
        leaf = 0
        for level in levels:
            if level.get("type") == _READER:
                plan = leaves[leaf] if leaves is not None and leaf < len(leaves) else None
                _check_reader(level, leaf, plan, (g, len(trees), rank, worker), slices, hint)
                leaf += 1
                continue
            cls = classes.of(level)
            if cls is None:
                continue  # named by the restore (an unknown stage)
            try:
                held = list(cls.held_keys(level))
            except (KeyError, TypeError, AttributeError):
                continue  # a level of another shape: the restore names it
            for plain in held:
                key = from_plain(plain)
                for identity in [key] if holds_sub_key(plain) else sample_keys(key):
                    of_leaf = sample_keys(identity)[0].leaf
                    if leaves is not None and of_leaf < len(leaves) and not leaves[of_leaf].once:
                        continue  # this leaf may deal a sample twice in an epoch
                    if identity in keys:
                        first_rank, first_worker, first_plain = keys[identity]
                        raise StateError(
                            f"the old states hold sample {short_repr(to_plain(identity))} "
                            f"twice: old rank {first_rank} worker {first_worker} buffers "
                            f"{short_repr(first_plain)} and old rank {rank} worker {worker} "
                            f"({level.get('type')}) buffers {short_repr(plain)}; delivering "
                            f"both would repeat it. The states were edited; refusing them{hint}"
                        )
                    keys[identity] = (rank, worker, plain)


def check_each_rank(
    states: Sequence[RankState],
    world_size: int,
    classes: StageClasses,
    leaves: list[LeafPlan] | None = None,
) -> None:
    """:func:`check_ownership` of each rank's state alone, of a run of ``world_size`` ranks:
    its workers at their global workers, the other ranks' places empty."""
    for state in states:
        empty = [None] * len(state.workers)
        ranks = [
            RankState({"rank": k}, 0, 0, state.workers if k == state.rank else empty, 0)
            for k in range(world_size)
        ]
        check_ownership(ranks, classes, leaves)


def _check_reader(
    level: dict[str, Any],
    leaf: int,
    plan: LeafPlan | None,
    where: tuple[int, int, int, int],
    slices: dict[tuple[int, int, int], tuple[int, int]],
    hint: str,
) -> None:
    """One old Reader level of :func:`check_ownership`; ``where``: its old global worker,
    the old global workers, its old rank and worker."""
    g, workers, rank, worker = where
    who = f"old rank {rank} worker {worker}"
    epoch, opened, nxt = level.get("epoch"), level.get("open"), level.get("next")
    if not isinstance(epoch, int) or not isinstance(opened, list):
        return
    dealing = level.get("dealing")
    if plan is not None and plan.table is not None and dealing in DEALINGS:
        table = plan.table(dealing, workers)  # the state's own dealing and layout
        plan = plan._replace(slices=table.num_slices, open_error=table.open_error)
        past = table.past_end(nxt, g) if isinstance(nxt, int) else None
    elif plan is not None and isinstance(nxt, int):
        past = next_past_end(nxt, plan.slices, g, workers)
    else:
        past = None
    if past is not None:
        raise StateError(
            f"{who} (global worker {g}): leaf {leaf}'s Reader: {past}; its samples would "
            "be lost. The state was edited or belongs to another dataset; refusing it"
        )
    for entry in opened:
        if not (isinstance(entry, list) and entry and isinstance(entry[0], int)):
            continue
        slice_id = entry[0]
        if plan is not None and not 0 <= slice_id < plan.slices:
            raise StateError(
                f"{who}: leaf {leaf}'s Reader has slice {slice_id} open, outside the leaf's "
                f"{plan.slices} slices; refusing the state"
            )
        position = entry[1] if len(entry) == 2 and isinstance(entry[1], int) else None
        outside = (
            plan.open_error(slice_id, position)
            if plan is not None and plan.open_error is not None and position is not None
            else None
        )
        if outside is not None:
            raise StateError(
                f"{who}: leaf {leaf}'s Reader: {outside}; its samples would be repeated or "
                "lost. The state was edited or belongs to another dataset; refusing it"
            )
        if plan is not None and not plan.once:
            continue  # a slice may be dealt twice in one epoch of this leaf
        place = (leaf, epoch, slice_id)
        if place in slices:
            first = slices[place]
            raise StateError(
                f"the old states have slice {slice_id} of leaf {leaf} (reader epoch {epoch}) "
                f"open twice: in old rank {first[0]} worker {first[1]} and in {who}; reading "
                f"it in both would repeat its samples. The states were edited; refusing them{hint}"
            )
        slices[place] = (rank, worker)
