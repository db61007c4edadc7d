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
from fractions import Fraction
from typing import Any

from energon_lite.errors import StateError, short_repr
from energon_lite.quotas import PER_WORKER, exact_repetitions, passes
from energon_lite.resume.config_match import (
    LAYOUT,
    check_same_config,
    comparable_config,
    refuse_unmovable,
)
from energon_lite.resume.levels import (
    StageClasses,
    holds_sub_key,
    registered_classes,
)
from energon_lite.resume.ownership import LeafPlan, check_ownership
from energon_lite.resume.rank_state import RankState, SavedRun, read_run
from energon_lite.stages.base import Stage
from energon_lite.stages.blend_epochized import EpochizedBlend
from energon_lite.stages.elastic_deal import ElasticDeal, LeafWork
from energon_lite.stages.reader import Reader
from energon_lite.state.restore_key import SampleKey, from_plain, sample_keys

_READER, _EPOCHIZED = Reader.__name__, EpochizedBlend.__name__  # the leftover's own stages


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
    position is inside the epoch's plan (:func:`energon_lite.resume.ownership.check_ownership`).
    The stage classes are the registry's: no chain is built here."""
    run = read_run(states)
    refuse_unmovable(run.config)
    if current_config is not None:
        moved_config = {**run.config, **{k: current_config[k] for k in LAYOUT}}
        check_same_config(moved_config, comparable_config(moved_config, current_config))
    classes = registered_classes(tree for state in run.ranks for tree in state.workers)
    check_ownership(run.ranks, classes, leaves)
    moved = redistributed(run, world_size, num_workers, classes)
    return [state.plain() for state in moved]


def redistributed(
    run: SavedRun,
    world_size: int,
    num_workers: int,
    classes: StageClasses,
) -> list[RankState]:
    """:func:`redistribute` of a run's states already read (:func:`read_run`) and checked:
    against the new loader's configuration, and to own their work once
    (:func:`energon_lite.resume.ownership.check_ownership`); each level read by its class in
    ``classes``."""
    config, epoch = run.config, run.epoch
    if world_size < 1 or num_workers < 0:
        raise StateError(f"new layout {world_size=}, {num_workers=} is not a layout")
    old = [w for s in run.ranks for w in s.workers]  # by old global worker id
    new_wpr = max(1, num_workers)
    if all(w is None for w in old):  # between passes: every new worker starts fresh
        workers: list[Any] = [None] * (world_size * new_wpr)
    elif len(old) == world_size * new_wpr:
        # as many worker pipelines as before (what Energon's redist allows): pipelines are
        # cut by global worker id, so each moves whole and continues its own stream exactly
        workers = copy.deepcopy(old)
    else:
        levels = [levels for state in run.ranks for levels in state.levels]
        redistribution = _Redistribution(config, epoch, old, levels, world_size * new_wpr, classes)
        redistribution.delivered = delivered_steps(run.ranks, classes)
        workers = redistribution.new_states()
    new_config = {**config, "world_size": world_size, "num_workers": num_workers}
    return [
        RankState(
            config={**new_config, "rank": rank},
            epoch=epoch,
            next_worker=0,
            workers=workers[rank * new_wpr : (rank + 1) * new_wpr],
            in_pass=0,
            paths=run.paths,
        )
        for rank in range(world_size)
    ]


def delivered_steps(states: list[RankState], classes: StageClasses) -> int:
    """The batches each old rank had delivered: its ``in_pass`` plus the steps delivered
    before its own layout started (``Stage.delivered_base``: a weighted blend's ``base``);
    the most of any rank."""
    out = 0
    for state in states:
        base = 0
        for levels in state.levels:
            for level in levels:
                cls = classes.of(level)
                if cls is not None:
                    base = max(base, cls.delivered_base(level))
        out = max(out, state.in_pass + base)
    return out


class _Redistribution:
    def __init__(
        self,
        config: dict[str, Any],
        epoch: int,
        old: list[Any],
        levels: list[list[dict[str, Any]]],
        new: int,
        classes: StageClasses,
    ) -> None:
        self.epoch, self.old, self.new, self.classes = epoch, old, new, classes
        self.delivered = 0  # set by redistribute (delivered_steps)
        self.G = len(old)
        self.epochized = config["blend_mode"] == "epochized"
        self.reader_repeat = bool(config["repeat"]) and not self.epochized
        self.repeat = bool(config["repeat"])
        self.template = next(w for w in old if w is not None)
        self.levels = levels  # per old worker, walked once
        template = self.levels[old.index(self.template)]
        self.num_leaves = sum(1 for level in template if level.get("type") == _READER)
        reps = config.get("weights") or []
        self.reps = [exact_repetitions(r or 0) for r in reps] if self.epochized else []
        for g, walked in enumerate(self.levels):
            for level in walked:
                if "left" in level:
                    raise StateError(
                        f"old global worker {g}: its {level.get('type')} is still delivering "
                        "the leftover of an earlier elastic restore; resume on that layout "
                        "until its epoch ends before changing the layout again"
                    )

    # old workers -------------------------------------------------------------------------

    def _readers(self, g: int) -> list[dict[str, Any] | None]:
        if self.old[g] is None:
            return [None] * self.num_leaves
        return [level for level in self.levels[g] if level.get("type") == _READER]

    def _blend(self, g: int) -> dict[str, Any]:
        found = [lv for lv in self.levels[g] if lv.get("type") == _EPOCHIZED]
        if found:
            return found[0]
        return {"epoch": self.epoch, "passes": [[0, 0]] * self.num_leaves, "done": False}

    def _buffered(self, g: int) -> list[SampleKey]:
        """The samples in old worker ``g``'s buffers, in stage order."""
        keys: list[Any] = []
        for level in self.levels[g]:
            cls = _stage(self.classes, level)
            refusal = cls.elastic_refusal(level)
            if refusal is not None:
                raise StateError(f"old global worker {g}: {refusal}")
            keys += cls.held_keys(level)
        out = []
        for plain in keys:
            key = from_plain(plain)
            if holds_sub_key(plain):
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
        return dealt_chain(self.template, deal, self.classes)


def dealt_chain(
    template: dict[str, Any], deal: ElasticDeal, classes: StageClasses
) -> dict[str, Any]:
    """A new worker's chain state: ``template`` (a chain state of the same stages) with each
    level as its stage class in ``classes`` builds it from ``deal`` (``Stage.elastic_state``)."""
    parents: dict[str, Any] = {}  # first: the Readers take their leaves' work in their order
    if "source" in template:
        parents["source"] = dealt_chain(template["source"], deal, classes)
    if "sources" in template:
        parents["sources"] = [dealt_chain(child, deal, classes) for child in template["sources"]]
    own = _stage(classes, template).elastic_state(template, deal)
    return {"type": template["type"], **own, **parents}


def _stage(classes: StageClasses, level: dict[str, Any]) -> type[Stage]:
    """The class of a saved level; StateError naming a stage no imported class has."""
    cls = classes.of(level)
    if cls is None:
        raise StateError(
            "elastic restore does not know how to redistribute stage "
            f"{short_repr(level.get('type'))} (no stage class of that name is imported)"
        )
    return cls
