"""Elastic resume: the states of one layout (ranks x workers) redistributed over another.

:func:`redistribute` is a pure, deterministic function of the old rank states and the new
layout; it needs no dataset, so ``SavableLoader.restore_state_global`` (in the trainer) and
``energon-lite checkpoint redist`` (offline) give the same new states. Each new rank then
restores its own state with ``restore_state_rank``.

What moves (per leaf; see :mod:`energon_lite.stages.leftover` for how a new reader reads its part):

* every old worker's unfinished reader epoch: the slice positions it had not started (its
  ``next``; O(old workers) integers), and the slices it had part-read (``open``);
* every sample sitting in an old worker's buffers (shuffle buffer, packing buffer and queue,
  group-batch buckets; packs are split into their members): dealt round robin to the new
  global workers, which read them again first;
* with ``blend_epochized``, the old workers' remaining passes of their blend epoch, and of a
  fractional pass exactly the remaining quota.

The stages' own counters start fresh on the new layout (shuffle and blend draws, group-batch
steps). Each stage class says what its saved level holds and how it starts on the new layout
(``held_keys``, ``elastic_refusal``, ``ELASTIC_FRESH`` / ``elastic_state`` in
:mod:`energon_lite.stages.base`); this module deals the readers' and buffers' work and asks
each stage for the rest, through an :class:`ElasticDeal`.

With ``repeat=True`` each old worker's remaining part of *its own* current epoch is
delivered exactly once, then every new worker starts the epoch after the latest one any old
worker was in. Refused, naming the case: states of different loaders or passes, validation
loaders (their slices depend on the layout), ``limit=``, a generator ``encode_sample`` part-way
through its outputs (or its outputs in a buffer), and a state still delivering the leftover
of an earlier elastic restore.

With as many worker pipelines as before (ranks x workers kept, the only case Energon's
``redist`` handles), nothing is dealt: pipelines are cut by global worker id, so each
pipeline's state moves whole to the new rank that has that id and continues its own stream
exactly.

(Over 300 lines: the checks, the walk over old states, the segments and the new states are
one algorithm, read top to bottom.)
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NamedTuple

from energon_lite.errors import StateError, short_repr
from energon_lite.quotas import PER_WORKER, exact_repetitions, next_past_end, passes
from energon_lite.stages.base import Stage, stage_class
from energon_lite.stages.blend_epochized import EpochizedBlend
from energon_lite.stages.blend_weighted import WeightedBlend
from energon_lite.stages.reader import Reader
from energon_lite.stages.slices import DEALINGS, SliceTable
from energon_lite.state.codec import STATE_VERSION, check_same_config, state_count, state_digest
from energon_lite.state.restore_key import SampleKey, from_plain, sample_keys, to_plain
from energon_lite.state.upgrade import upgrade_state

LAYOUT = ("rank", "world_size", "num_workers")
_READER, _EPOCHIZED = Reader.__name__, EpochizedBlend.__name__  # the leftover's own stages
_WEIGHTED = WeightedBlend.__name__


class LeafWork(NamedTuple):
    """One leaf's part of the old layout's unfinished work, for one new worker."""

    keys: list[list[Any]]  # plain sample keys from the old buffers, dealt to this worker
    segs: list[dict[str, Any]]  # unfinished reader-epoch segments (every new worker gets all)
    last_epoch: int  # the latest reader epoch any old worker was in


@dataclass
class ElasticDeal:
    """What a stage's ``elastic_state`` may ask while one new worker's state is built."""

    worker: int  # the new global worker
    workers: int  # new global workers
    old_workers: int  # old global workers
    epoch: int  # the loader's pass
    blend_epoch: int  # the blend epoch after the latest one any old worker was in
    reader_repeat: bool  # readers go on to further epochs after the leftover
    leaves: Iterator[LeafWork]  # per leaf, in the order the readers appear in a state
    delivered: int = 0  # batches each old rank had delivered (a blend schedule's step)

    def next_leaf(self) -> LeafWork:
        """The next leaf's work (each Reader level takes one, depth first)."""
        return next(self.leaves)


def same_layout(states: list[Any], world_size: int, num_workers: int) -> bool:
    """Whether ``states`` (one per old rank) were saved with this layout."""
    return len(states) == world_size and all(
        isinstance(s, dict)
        and isinstance(s.get("config"), dict)
        and s["config"].get("world_size") == world_size
        and s["config"].get("num_workers") == num_workers
        for s in states
    )


def redistribute(
    states: list[Any],
    world_size: int,
    num_workers: int,
    current_config: dict[str, Any] | None = None,
    leaves: list[LeafPlan] | None = None,
) -> list[dict[str, Any]]:
    """The loader states of ``world_size`` ranks x ``num_workers`` workers that together
    continue ``states`` (one per old rank, from ``save_state_global``): nothing repeated,
    nothing lost. ``current_config`` (the new loader's ``dataset.config()``) makes a state of
    another dataset, seed, batch size or stage set fail here, naming the difference;
    ``leaves`` (each leaf's plan, where the dataset is at hand) also checks that every old
    position is inside the epoch's plan (:func:`check_ownership`)."""
    if isinstance(states, list):  # read from a file, perhaps: today's form first
        states = [upgrade_state(state, strict=False) for state in states]
    config, epoch = _check_old(states)
    check_ownership(states, leaves)
    if current_config is not None:
        check_same_config({**config, **{k: current_config[k] for k in LAYOUT}}, current_config)
    if world_size < 1 or num_workers < 0:
        raise StateError(f"new layout {world_size=}, {num_workers=} is not a layout")
    old = [w for s in states for w in s["workers"]]  # by old global worker id
    new_wpr = max(1, num_workers)
    if all(w is None for w in old):  # between passes: every new worker starts fresh
        workers: list[Any] = [None] * (world_size * new_wpr)
    elif len(old) == world_size * new_wpr:
        # as many worker pipelines as before (what Energon's redist allows): pipelines are
        # cut by global worker id, so each moves whole and continues its own stream exactly
        workers = copy.deepcopy(old)
    else:
        redistribution = _Redistribution(config, epoch, old, world_size * new_wpr)
        redistribution.delivered = delivered_steps(states)
        workers = redistribution.new_states()
    new_config = {**config, "world_size": world_size, "num_workers": num_workers}
    result = []
    for rank in range(world_size):
        state = {
            "type": "SavableLoader",
            "version": STATE_VERSION,
            "config": {**new_config, "rank": rank},
            "epoch": epoch,
            "next_worker": 0,
            "workers": workers[rank * new_wpr : (rank + 1) * new_wpr],
            "in_pass": 0,
        }
        if isinstance(states[0], dict) and "paths" in states[0]:  # for messages only
            state["paths"] = states[0]["paths"]
        state["digest"] = state_digest(state)
        result.append(state)
    return result


def delivered_steps(states: list[Any]) -> int:
    """The batches each old rank had delivered: its ``in_pass`` plus the steps delivered
    before its own layout started (a weighted blend's ``base``); the most of any rank."""
    out = 0
    for state in states:
        base = 0
        for tree in state["workers"]:
            for level in walk_states(tree):
                if level.get("type") == _WEIGHTED:
                    base = max(base, WeightedBlend.delivered_base(level))
        out = max(out, state_count(state.get("in_pass", 0), "in_pass") + base)
    return out


def _check_old(states: Any) -> tuple[dict[str, Any], int]:
    """The old states' common config and pass; StateError for anything inconsistent."""
    if not isinstance(states, list) or not states:
        raise StateError(
            f"elastic restore needs the list of every old rank's state, got {short_repr(states)}"
        )
    first: dict[str, Any] | None = None
    epochs = set()
    for rank, state in enumerate(states):
        if not isinstance(state, dict) or state.get("type") != "SavableLoader":
            raise StateError(
                f"old rank {rank}: not an energon_lite loader state: {short_repr(state)}"
            )
        if state.get("version") != STATE_VERSION:
            raise StateError(
                f"old rank {rank}: state version {short_repr(state.get('version'))}, need {STATE_VERSION}"
            )
        if state.get("digest") != state_digest(state):
            raise StateError(
                f"old rank {rank}: the state does not match its digest; it was edited or corrupted"
            )
        config = state.get("config")
        if not isinstance(config, dict) or config.get("rank") != rank:
            raise StateError(
                f"old rank {rank}: the state is rank {short_repr((config or {}).get('rank'))}'s; "
                "pass the states in rank order, one per old rank"
            )
        if config.get("world_size") != len(states):
            raise StateError(
                f"old rank {rank}: saved with world_size={config.get('world_size')}, but "
                f"{len(states)} states were given; pass every old rank's state"
            )
        if first is None:
            first = config
        else:
            check_same_config({**config, "rank": 0}, {**first, "rank": 0})
        workers = state.get("workers")
        if not isinstance(workers, list) or len(workers) != max(1, int(config["num_workers"])):
            raise StateError(f"old rank {rank}: {short_repr(workers)} is not one state per worker")
        epochs.add(state_count(state.get("epoch"), f"old rank {rank} epoch"))
    assert first is not None
    if len(epochs) != 1:
        raise StateError(
            f"the old ranks are in different passes {sorted(epochs)}; save every rank at the "
            "same step (save_state_global)"
        )
    if "wrapper" in first:  # energon_lite.wrappers: a chain composed by hand
        raise StateError(
            f"elastic restore of a {first['wrapper']} composition is not supported; restore "
            "it on the old number of ranks and workers, or start it over"
        )
    if not first.get("training"):
        raise StateError(
            "elastic restore of a validation/test loader is not supported: its slices are cut "
            "per layout; restore it on the old layout or start it over"
        )
    if first.get("limit") is not None:
        raise StateError(f"elastic restore with limit={first['limit']} is not supported")
    return first, epochs.pop()


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


def check_ownership(states: list[Any], leaves: list[LeafPlan] | None = None) -> None:
    """StateError unless the old states, taken together, own their work once: no sample is
    buffered twice (in two old workers, or twice in one), no slice of a reader epoch is open
    twice, and with ``leaves`` (the dataset's plan per leaf) every Reader ``next`` and open
    slice is inside the epoch's plan. Each state passes its own checks when restored alone;
    an edit made consistently in two states (the digest recomputed, as anyone holding the
    files can) passes those and would repeat or lose samples.

    Without ``leaves`` every leaf is taken to deal each slice once per epoch (the default).
    Shapes are checked by the restore itself; this only reads what has the expected shape."""
    trees = [
        (_rank_of(state, index), worker, tree)
        for index, state in enumerate(states)
        if isinstance(state, dict) and isinstance(state.get("workers"), list)
        for worker, tree in enumerate(state["workers"])
    ]
    hint = NO_PLAN_HINT if leaves is None else ""
    keys: dict[Any, tuple[int, int, Any]] = {}
    slices: dict[tuple[int, int, int], tuple[int, int]] = {}
    for g, (rank, worker, tree) in enumerate(trees):
        leaf = 0
        for level in walk_states(tree):
            if level.get("type") == _READER:
                plan = leaves[leaf] if leaves is not None and leaf < len(leaves) else None
                _check_reader(level, leaf, plan, (g, len(trees), rank, worker), slices, hint)
                leaf += 1
                continue
            cls = stage_class(level.get("type"))
            if cls is None:
                continue  # named by the restore (an unknown stage)
            try:
                held = list(cls.held_keys(level))
            except (KeyError, TypeError, AttributeError):
                continue  # a level of another shape: the restore names it
            for plain in held:
                key = from_plain(plain)
                for identity in [key] if _has_sub(plain) else sample_keys(key):
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


def _rank_of(state: dict[str, Any], index: int) -> Any:
    """The rank a state says it is (one rank's state checked alone), else its place."""
    rank = state.get("config", {}).get("rank") if isinstance(state.get("config"), dict) else None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else index


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


def walk_states(tree: Any) -> Iterator[dict[str, Any]]:
    """Every stage level of a worker state, parents after children's order: depth first."""
    if isinstance(tree, dict):
        yield tree
        if "source" in tree:
            yield from walk_states(tree["source"])
        for child in tree.get("sources") or []:
            yield from walk_states(child)


class _Redistribution:
    def __init__(self, config: dict[str, Any], epoch: int, old: list[Any], new: int) -> None:
        self.epoch, self.old, self.new = epoch, old, new
        self.delivered = 0  # set by redistribute (delivered_steps)
        self.G = len(old)
        self.epochized = config["blend_mode"] == "epochized"
        self.reader_repeat = bool(config["repeat"]) and not self.epochized
        self.repeat = bool(config["repeat"])
        self.template = next(w for w in old if w is not None)
        self.num_leaves = sum(
            1 for level in walk_states(self.template) if level.get("type") == _READER
        )
        reps = config.get("weights") or []
        self.reps = [exact_repetitions(r or 0) for r in reps] if self.epochized else []
        for g, tree in enumerate(old):
            for level in walk_states(tree):
                if "left" in level:
                    raise StateError(
                        f"old global worker {g}: its {level.get('type')} is still delivering "
                        "the leftover of an earlier elastic restore; resume on that layout "
                        "until its epoch ends before changing the layout again"
                    )

    # old workers -------------------------------------------------------------------------

    def _readers(self, g: int) -> list[dict[str, Any] | None]:
        tree = self.old[g]
        if tree is None:
            return [None] * self.num_leaves
        return [level for level in walk_states(tree) if level.get("type") == _READER]

    def _blend(self, g: int) -> dict[str, Any]:
        tree = self.old[g]
        found = [lv for lv in walk_states(tree) if lv.get("type") == _EPOCHIZED]
        if found:
            return found[0]
        return {"epoch": self.epoch, "passes": [[0, 0]] * self.num_leaves, "done": False}

    def _buffered(self, g: int) -> list[SampleKey]:
        """The samples in old worker ``g``'s buffers, in stage order."""
        keys: list[Any] = []
        for level in walk_states(self.old[g]):
            cls = _stage(level)
            refusal = cls.elastic_refusal(level)
            if refusal is not None:
                raise StateError(f"old global worker {g}: {refusal}")
            keys += cls.held_keys(level)
        out = []
        for plain in keys:
            key = from_plain(plain)
            if _has_sub(plain):
                raise StateError(
                    f"old global worker {g}: buffered item {short_repr(plain)} is one output of a "
                    "generator encode_sample; an elastic restore cannot re-deliver it alone"
                )
            out += sample_keys(key)
        return out

    # the new states ------------------------------------------------------------------------

    def _segments(self, leaf: int) -> tuple[list[dict[str, Any]], int, int]:
        """Leaf ``leaf``'s unfinished segments, the reader epoch and blend epoch after them."""
        segs: dict[int, dict[str, Any]] = {}

        def seg(epoch: int) -> dict[str, Any]:
            return segs.setdefault(
                epoch, {"epoch": epoch, "workers": [], "open": [], "fraction": []}
            )

        last_reader, last_blend = self.epoch, self.epoch
        for g in range(self.G):
            rs = self._readers(g)[leaf]
            if self.epochized:
                blend = self._blend(g)
                if blend["done"]:
                    continue
                epoch_g = int(blend["epoch"])
                last_blend = max(last_blend, epoch_g)
                number, taken = blend["passes"][leaf]
                reps = self.reps[leaf]
                whole, fraction = int(reps), reps - int(reps)
                total = whole + (1 if fraction else 0)
                per_epoch = passes(reps)
                for k in range(number, total):
                    r = epoch_g * per_epoch + k
                    entry = seg(r)
                    if k == number and rs is not None:
                        if rs["epoch"] != r:
                            raise StateError(
                                f"old global worker {g}: leaf {leaf}'s reader is in epoch "
                                f"{rs['epoch']}, its blend in pass {r}; the state is corrupt"
                            )
                        entry["workers"].append([g, rs["next"], taken])
                        entry["open"] += [list(o) for o in rs["open"]]
                    else:
                        entry["workers"].append([g, 0, taken if k == number else 0])
                    if k == whole and fraction:
                        f = Fraction(fraction)
                        entry["fraction"] = [f.numerator, f.denominator, epoch_g]
                        if blend.get("rounding") == PER_WORKER:
                            entry["fraction"].append(1)
            else:
                if rs is None:
                    rs = {"epoch": self.epoch, "next": 0, "open": [], "done": False}
                if rs["done"]:
                    continue
                last_reader = max(last_reader, int(rs["epoch"]))
                entry = seg(int(rs["epoch"]))
                entry["workers"].append([g, rs["next"], 0])
                entry["open"] += [list(o) for o in rs["open"]]
        return [segs[e] for e in sorted(segs)], last_reader, last_blend

    def new_states(self) -> list[Any]:
        deals: list[list[list[Any]]] = [
            [[] for _ in range(self.num_leaves)] for _ in range(self.new)
        ]
        count = 0
        for g in range(self.G):
            for key in self._buffered(g):
                deals[count % self.new][key.leaf].append(["s", *key])
                count += 1
        leaves = [self._segments(leaf) for leaf in range(self.num_leaves)]
        blend_epoch = max((blend for _, _, blend in leaves), default=self.epoch)
        return [self._worker(w, deals[w], leaves, blend_epoch) for w in range(self.new)]

    def _worker(
        self, w: int, keys: list[list[Any]], leaves: list[Any], blend_epoch: int
    ) -> dict[str, Any]:
        deal = ElasticDeal(
            worker=w,
            workers=self.new,
            old_workers=self.G,
            epoch=self.epoch,
            blend_epoch=blend_epoch,
            reader_repeat=self.reader_repeat,
            delivered=self.delivered,
            leaves=iter(
                LeafWork(keys[leaf], segs, last_reader)
                for leaf, (segs, last_reader, _) in enumerate(leaves)
            ),
        )

        def rebuild(level: dict[str, Any]) -> dict[str, Any]:
            out: dict[str, Any] = {"type": level["type"]}
            out.update(_stage(level).elastic_state(level, deal))
            if "source" in level:
                out["source"] = rebuild(level["source"])
            if "sources" in level:
                out["sources"] = [rebuild(child) for child in level["sources"]]
            return out

        return rebuild(self.template)


def _stage(level: dict[str, Any]) -> type[Stage]:
    """The class of a saved level; StateError naming a stage no imported class has."""
    cls = stage_class(level.get("type"))
    if cls is None:
        raise StateError(
            "elastic restore does not know how to redistribute stage "
            f"{short_repr(level.get('type'))} (no stage class of that name is imported)"
        )
    return cls


def _has_sub(plain: Any) -> bool:
    """Whether a plain restore key holds a SubKey anywhere."""
    if isinstance(plain, list) and plain:
        return plain[0] == "sub" or any(_has_sub(x) for x in plain[1:])
    return False
