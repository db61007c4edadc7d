"""``Leftover``: the work a Reader owes after an elastic restore, before its own epochs.

:func:`energon_lite.resume.elastic.redistribute` turns the states of an old layout (``G`` global
workers) into states of a new one (``W`` global workers). Per leaf, what the old layout had
not delivered is described compactly and handed to *every* new reader, which computes its
own share (no dataset is needed to redistribute, so ``energon-lite checkpoint redist``
works on state files alone):

* ``keys``: sample keys to replay first (this worker's deal of the samples that sat in the
  old workers' buffers: shuffle, packing, grouping);
* ``segs``: one segment per reader epoch ``r`` that some old worker had not finished, with
  ``workers = [[g, next, taken], ...]`` (old worker ``g`` still owed its slice positions
  ``k >= next`` of the epoch) and ``open = [[slice, position], ...]`` (slices the old
  workers had part-read). Slices are the old layout's (the reader's table for ``G`` workers
  under the state's dealing, :mod:`energon_lite.stages.slices`). The items of a segment are
  the open slices, sorted, then the owed positions in the order ``(k, g)``; new worker ``w``
  of ``W`` takes items ``w, w + W, ...`` and reads them one after the other;
* a segment of a fractional ``blend_epochized`` pass also carries ``fraction = [num, den,
  blend epoch]`` (plus a 1 when the old run rounded the fraction per worker,
  :data:`energon_lite.quotas.PER_WORKER`; without it, ``exact``): the old workers owed only
  ``plan[g] - taken`` samples of it, and that remaining quota is split over the new
  workers' shares by largest remainder (:func:`energon_lite.quotas.largest_remainder`),
  exactly.

Progress is ``k`` (keys replayed), ``s`` (current segment), ``item`` (next item of my share),
``cur`` (the slice being read, ``[slice, position]`` or ``[]``) and ``emitted`` (samples of the
current segment). State: O(old global workers) integers per leaf, only until it is done.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from energon_lite.errors import StateError, short_repr
from energon_lite.quotas import EXACT, PER_WORKER, fraction_shares, largest_remainder
from energon_lite.state.codec import state_count
from energon_lite.state.restore_key import SampleKey, from_plain

if TYPE_CHECKING:
    from energon_lite.stages.reader import Reader

LEFT_KEYS = ("keys", "segs", "share", "G", "k", "s", "item", "cur", "emitted")
SEG_KEYS = ("epoch", "workers", "open", "fraction")


class Leftover:
    """One reader's part of an old layout's unfinished epoch (see the module docstring)."""

    def __init__(self, reader: Reader, state: Any) -> None:
        self.reader = reader
        what = f"Reader(leaf {reader.leaf_id}) leftover"
        if not isinstance(state, dict) or sorted(state) != sorted(LEFT_KEYS):
            raise StateError(f"{what}: {short_repr(state)} must have the fields {LEFT_KEYS}")
        self.keys = [from_plain(key) for key in _list(state["keys"], what)]
        for key in self.keys:
            if not isinstance(key, SampleKey) or key.leaf != reader.leaf_id:
                raise StateError(f"{what}: {short_repr(key)} is not a sample key of this leaf")
        self.segs = [_check_seg(seg, what) for seg in _list(state["segs"], what)]
        share = _list(state["share"], what)
        if len(share) != 2 or not 0 <= state_count(share[0], what) < state_count(share[1], what):
            raise StateError(f"{what}: share {short_repr(share)} is not [worker, workers]")
        self.share, self.workers = int(share[0]), int(share[1])
        self.old_workers = state_count(state["G"], what)
        self.k = state_count(state["k"], what)
        self.s = state_count(state["s"], what)
        self.item = state_count(state["item"], what)
        self.emitted = state_count(state["emitted"], what)
        self.cur = [state_count(x, what) for x in _list(state["cur"], what)]
        if self.k > len(self.keys) or self.s > len(self.segs) or len(self.cur) not in (0, 2):
            raise StateError(f"{what}: progress {short_repr(state)} is past its work; corrupt")
        self._saved_keys = [["s", *key] for key in self.keys]  # never changed
        self._plans: dict[int, tuple[list[tuple[int, int, int]], int | None]] = {}
        self.table = reader.table(reader.dealing, self.old_workers)  # the old layout's slices

    # what this worker owes ----------------------------------------------------------------

    def _plan(self, index: int) -> tuple[list[tuple[int, int, int]], int | None]:
        """My items ``(slice, start, end)`` of segment ``index`` and my quota (None: all)."""
        plan = self._plans.get(index)
        if plan is None:
            plan = self._plans[index] = self._make_plan(self.segs[index])
        return plan

    def _make_plan(self, seg: dict[str, Any]) -> tuple[list[tuple[int, int, int]], int | None]:
        table, G, epoch = self.table, self.old_workers, seg["epoch"]
        opened = sorted((int(s), int(p)) for s, p in seg["open"])
        for slice_id, position in opened:
            outside = table.open_error(slice_id, position)  # the Reader's own rule
            if outside is not None:
                raise StateError(f"leftover of reader epoch {epoch}: {outside}; corrupt")
        for g, nxt, _ in seg["workers"]:
            past = table.past_end(nxt, g) if g < G else f"old worker {g} is not one of {G}"
            if past is not None:  # the rule of the Reader's own restore
                raise StateError(f"leftover of reader epoch {epoch}: {past}; corrupt")
        # owed: old worker g's positions k >= next, in the order (k, g)
        rounds, owed = [], []
        for g, nxt, _ in seg["workers"]:
            positions = np.arange(nxt, table.worker_slices(g), dtype=np.int64)
            rounds.append(positions * G + g)
            owed.append(table.slice_ids(epoch, g, positions))
        ids = np.zeros(0, np.int64)
        if owed:
            ids = np.concatenate(owed)[np.argsort(np.concatenate(rounds), kind="stable")]
        starts, ends = table.extents(ids)
        open_ids = np.asarray([s for s, _ in opened], dtype=np.int64)
        _, open_ends = table.extents(open_ids)
        items = [(s, p, int(e)) for (s, p), e in zip(opened, open_ends)]
        items += list(zip(ids.tolist(), starts.tolist(), ends.tolist()))
        mine = items[self.share :: self.workers]
        if not seg["fraction"]:
            return mine, None
        num, den, blend_epoch = seg["fraction"][:3]
        rounding = PER_WORKER if seg["fraction"][3:] == [1] else EXACT
        counts = table.samples_per_worker(epoch).tolist()
        plan = fraction_shares(counts, Fraction(num, den), blend_epoch, rounding)
        quota = sum(plan[g] - taken for g, _, taken in seg["workers"])
        sizes = [sum(e - s for _, s, e in items[w :: self.workers]) for w in range(self.workers)]
        pool = sum(sizes)
        if not 0 <= quota <= pool:
            raise StateError(f"leftover: quota {quota} outside the {pool} samples left; corrupt")
        shares = largest_remainder(sizes, Fraction(quota, pool or 1), epoch) if pool else sizes
        return mine, shares[self.share]

    def total(self) -> int:
        """Samples this worker delivers from its leftover, from the start."""
        count = len(self.keys)
        for index in range(len(self.segs)):
            items, quota = self._plan(index)
            count += sum(e - s for _, s, e in items) if quota is None else quota
        return count

    # reading ------------------------------------------------------------------------------

    def next_sample(self) -> dict[str, Any] | None:
        """The next owed sample, or None when everything owed was delivered."""
        reader = self.reader
        if self.k < len(self.keys):
            self.k += 1
            return reader.fetch(self.keys[self.k - 1])
        while self.s < len(self.segs):
            items, quota = self._plan(self.s)
            if quota is None or self.emitted < quota:
                if self.cur:
                    slice_id, position = self.cur
                    shard, _, end = self.table.bounds(slice_id)
                    sample = reader._read(shard, position, end, self.segs[self.s]["epoch"])
                    self.cur = [slice_id, position + 1] if position + 1 < end else []
                    self.emitted += 1
                    return sample
                if self.item < len(items):
                    slice_id, start, _ = items[self.item]
                    self.cur, self.item = [slice_id, start], self.item + 1
                    continue
            self.s, self.item, self.cur, self.emitted = self.s + 1, 0, [], 0
        return None

    def save(self) -> dict[str, Any]:
        return {
            "keys": self._saved_keys,  # the same list every time: it travels once
            "segs": self.segs,  # never changed after restore
            "share": [self.share, self.workers],
            "G": self.old_workers,
            "k": self.k,
            "s": self.s,
            "item": self.item,
            "cur": list(self.cur),
            "emitted": self.emitted,
        }


def start_left(
    keys: list[Any], segs: list[dict[str, Any]], worker: int, workers: int, old_workers: int
) -> dict[str, Any]:
    """The ``left`` state of new worker ``worker`` of ``workers``, nothing delivered yet:
    its deal of the buffered ``keys`` and the old layout's unfinished ``segs``."""
    return {
        "keys": keys,
        "segs": segs,
        "share": [worker, workers],
        "G": old_workers,
        "k": 0,
        "s": 0,
        "item": 0,
        "cur": [],
        "emitted": 0,
    }


def describe_left(left: dict[str, Any]) -> str:
    """A saved ``left`` in words (``energon-lite checkpoint info``)."""
    return (
        f"leftover of an elastic restore: {len(left['keys']) - left['k']} samples to "
        f"replay, {len(left['segs']) - left['s']} unfinished epoch segment(s) of "
        f"{left['G']} old workers"
    )


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise StateError(f"{what}: {short_repr(value)} must be a list; the state is corrupt")
    return value


def _check_seg(seg: Any, what: str) -> dict[str, Any]:
    if not isinstance(seg, dict) or sorted(seg) != sorted(SEG_KEYS):
        raise StateError(f"{what}: segment {short_repr(seg)} must have the fields {SEG_KEYS}")
    state_count(seg["epoch"], what)
    for entry in _list(seg["workers"], what):
        if not isinstance(entry, list) or len(entry) != 3:
            raise StateError(f"{what}: {short_repr(entry)} is not [worker, next, taken]")
        for x in entry:
            state_count(x, what)
    for entry in _list(seg["open"], what):
        if not isinstance(entry, list) or len(entry) != 2:
            raise StateError(f"{what}: {short_repr(entry)} is not [slice, position]")
        for x in entry:
            state_count(x, what)
    fraction = _list(seg["fraction"], what)
    if fraction and (
        len(fraction) not in (3, 4)
        or not all(state_count(x, what) >= 0 for x in fraction)
        or fraction[3:] not in ([], [1])
    ):
        raise StateError(
            f"{what}: fraction {short_repr(fraction)} is not [num, den, epoch] or "
            "[num, den, epoch, 1]"
        )
    if fraction and not 0 < fraction[0] < fraction[1]:
        raise StateError(f"{what}: fraction {short_repr(fraction)} is not in (0, 1)")
    return seg
