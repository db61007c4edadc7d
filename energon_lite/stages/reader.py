"""``Reader``: the samples of one leaf dataset that one global worker owns, slice by slice.

Algorithm. Which samples global worker ``g`` of ``G`` (ranks x workers) owns, cut into
*slices* of at most ``max_samples_per_sequence`` consecutive samples, and the order it reads
its slices in each epoch is the leaf's *dealing* (:mod:`energon_lite.stages.slices`):
``ranges`` (Energon's: each worker a contiguous, near-equal range of the split's samples,
so every worker reads whenever the split has at least one sample per worker) or
``slices`` (global slices, the epoch's positions ``g, g + G, ...``: what states saved before
the ``dealing`` field continue, :mod:`energon_lite.state.upgrade`). A worker keeps ``open_slices`` slices open and picks
the next one at random, weighted by what each has left; each open slice is read
sequentially in chunks (one ``pread`` per chunk).

``shuffle_over_epochs_multiplier`` m >= 1 permutes m copies of the slice list over m
epochs (each slice exactly m times per m epochs); -1 draws slices with replacement; None
keeps the slices in order.

State: the dealing, the epoch, the next position, the open slices as ``[slice_id,
next_sample]``, the random counter and a done flag: O(open_slices) integers whatever the
dataset size. After an elastic
restore (another number of ranks or workers) the state also carries ``left``: the old
layout's unfinished work this reader delivers first (:mod:`energon_lite.stages.leftover`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from energon_lite.errors import StateError, short_repr
from energon_lite.rng import CounterRng
from energon_lite.sources.base import Source
from energon_lite.stages.base import Stage
from energon_lite.stages.leftover import Leftover, describe_left, start_left
from energon_lite.stages.slices import DEALINGS, SliceTable, slice_table
from energon_lite.state.codec import state_count
from energon_lite.state.restore_key import SampleKey

if TYPE_CHECKING:
    from energon_lite.stages.elastic_deal import ElasticDeal

_CHUNK = 16  # samples read per pread from an open slice
_PREFETCH_SLICES = 8  # upcoming slices whose shards a source may fetch ahead (a hint)


class Reader(Stage):
    """Raw samples ``{__key__, __restore_key__, __shard__, <part>: bytes}`` of one leaf."""

    STATE_KEYS = ("epoch", "next", "open", "rng", "done", "dealing")
    OPTIONAL_KEYS = ("left",)  # only after an elastic restore, until that work is done
    DELTA_KEYS = ("left",)  # an elastic restore's leftover: its owed keys travel once
    STATS_LABEL = "read"
    STATS_HINT = (
        "reading is {percent}%: the storage is slow for this access pattern; a larger "
        "max_samples_per_sequence reads longer sequential runs, parallel_shard_iters "
        "more shards at once; or {more_workers}"
    )

    _open: list[list[int]]  # [slice_id, next sample] of each open slice
    _left: Leftover | None  # an elastic restore's leftover work, delivered first

    def __init__(
        self,
        dataset: Source,
        *,
        leaf_id: int,
        seed: int,
        worker_index: int,
        num_workers: int,
        max_samples_per_sequence: int | None,
        shuffle: bool,
        repeat: bool,
        open_slices: int = 1,
        shuffle_over_epochs_multiplier: int | None = 1,
        start_epoch: int = 0,
        dealing: str = "ranges",
        samples_before: int = 0,
    ) -> None:
        if dealing not in DEALINGS:
            raise ValueError(f"Reader: dealing {dealing!r} is not one of {DEALINGS}")
        self.dataset = dataset
        self.leaf_id = leaf_id
        self.seed = seed
        self.worker_index = worker_index
        self.num_workers = num_workers
        self.shuffle = shuffle
        self.repeat = repeat
        self.open_slices = max(1, open_slices)
        self.multiplier = shuffle_over_epochs_multiplier if shuffle else None
        self.start_epoch = start_epoch
        self.max_samples_per_sequence = max_samples_per_sequence
        self.fresh_dealing = dealing  # a restored state may name another (``dealing``)
        self.dealing = dealing
        # the samples of the leaves before this one: rotates which workers get one more
        self.samples_before = samples_before
        # derived caches (pure functions of the settings), not state
        self._tables: dict[tuple[str, int], SliceTable] = {}
        self._bounds_cache: dict[int, tuple[int, int, int]] = {}

    # what the library asks of the class (energon_lite.stages.base) ------------------------

    def stats_name(self) -> str:
        return f"Reader {self.leaf_id}"  # one row per leaf

    @classmethod
    def describe_level(cls, level: dict[str, Any]) -> list[str]:
        left = level.get("left")
        return [describe_left(left)] if isinstance(left, dict) else []

    @classmethod
    def elastic_state(cls, level: dict[str, Any], deal: ElasticDeal) -> dict[str, Any]:
        """The leaf's leftover first (``left``), then the epoch after the old workers' latest
        one (``repeat``) or nothing more."""
        leaf = deal.next_leaf()
        repeat = deal.reader_repeat
        return {
            "dealing": level["dealing"],  # the old run's dealing goes on
            "epoch": leaf.last_epoch + 1 if repeat else deal.epoch,
            "next": 0,
            "open": [],
            "rng": 0,
            "done": not repeat,
            "left": start_left(leaf.keys, leaf.segs, deal.worker, deal.workers, deal.old_workers),
        }

    # slice arithmetic (energon_lite.stages.slices) ---------------------------------------

    def table(self, dealing: str | None = None, workers: int | None = None) -> SliceTable:
        """The leaf's slices under ``dealing`` for ``workers`` global workers (default: this
        reader's own); the elastic restore reads an old layout's work through its table."""
        key = (dealing or self.dealing, workers or self.num_workers)
        found = self._tables.get(key)
        if found is None:
            found = self._tables[key] = slice_table(
                key[0],
                self.dataset,
                self.max_samples_per_sequence,
                key[1],
                self.seed,
                self.leaf_id,
                self.multiplier,
                self.samples_before,
            )
        return found

    @property
    def num_slices(self) -> int:
        return self.table().num_slices

    @property
    def slice_len(self) -> int:
        return self.table().slice_len

    def slice_bounds(self, slice_id: int) -> tuple[int, int, int]:
        """``(shard_id, start, end)`` of a slice id."""
        return self.table().bounds(slice_id)

    def _bounds(self, slice_id: int) -> tuple[int, int, int]:
        """``slice_bounds`` memoised for the open slices (a derived cache, not state)."""
        bounds = self._bounds_cache.get(slice_id)
        if bounds is None:
            if len(self._bounds_cache) > 4 * self.open_slices:
                self._bounds_cache.clear()
            bounds = self._bounds_cache[slice_id] = self.slice_bounds(slice_id)
        return bounds

    def open_slice_error(self, slice_id: int, position: int) -> str | None:
        """Why an open slice ``[slice_id, position]`` of a saved state is outside this
        leaf's plan, or None: the rule of this restore and of an elastic one."""
        return self.table().open_error(slice_id, position)

    def slices_once(self) -> bool:
        """Whether an epoch deals each slice at most once (shuffle_over_epochs_multiplier
        1, or no shuffle); with another multiplier a slice may come twice in one epoch."""
        return self.multiplier in (None, 1)

    def worker_slice_count(self) -> int:
        """How many slices this worker reads per epoch."""
        return self.table().worker_slices(self.worker_index)

    def _slice_at(self, epoch: int, position: int) -> int:
        ids = self.table().slice_ids(epoch, self.worker_index, np.asarray([position]))
        return int(ids[0])

    def slice_extents(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """First and end sample of each slice in ``ids`` (``slice_bounds``, vectorised)."""
        return self.table().extents(ids)

    def samples_per_worker(self, epoch: int, num_workers: int | None = None) -> np.ndarray:
        """Samples each of the ``num_workers`` global workers (default: this layout's) reads
        in ``epoch``."""
        return self.table(None, num_workers).samples_per_worker(epoch)

    def dealt_samples(self) -> int:
        """Samples this worker owns in one unshuffled pass over its share."""
        return self.table().dealt(self.worker_index)

    def restart(self, epoch: int) -> None:
        """Start over at the beginning of ``epoch``, keeping the random stream's position."""
        self._epoch, self._next, self._open, self._done = epoch, 0, [], False
        self._chunks.clear()
        self._left = None

    # the stage contract -----------------------------------------------------------------

    def next(self) -> dict[str, Any]:
        self._start_if_fresh()
        if self._left is not None:  # an elastic restore's leftover comes first
            owed = self._left.next_sample()
            if owed is not None:
                return owed
            self._left = None
        while True:
            count = self.worker_slice_count()
            while len(self._open) < self.open_slices and self._next < count:
                slice_id = self._slice_at(self._epoch, self._next)
                _, start, _ = self.slice_bounds(slice_id)
                self._open.append([slice_id, start])
                self._next += 1
                self._prefetch_next()
            if self._open:
                break
            if not self.repeat or self._done or count == 0:
                self._done = True
                raise StopIteration
            self._epoch += 1
            self._next = 0
        choice = 0
        if self.shuffle and len(self._open) > 1:
            bounds = self._bounds  # (a sample's choice weighs what each open slice has left)
            left = [bounds(s)[2] - pos for s, pos in self._open]
            target = self._rng.random() * sum(left)
            while choice < len(left) - 1 and target >= left[choice]:
                target -= left[choice]
                choice += 1
        entry = self._open[choice]
        slice_id, position = entry
        shard_id, _, end = self._bounds(slice_id)
        sample = self._read(shard_id, position, end)
        entry[1] = position + 1
        if entry[1] >= end:
            self._open.pop(choice)
        return sample

    def _prefetch_next(self) -> None:
        """Tell the source which shards the next slices of this worker's plan read (a source
        with a node-local shard cache fetches them ahead; not state: a restore recomputes)."""
        enabled = getattr(self.dataset, "prefetch_enabled", None)
        if enabled is None or not enabled():
            return
        count, epoch, ahead = self.worker_slice_count(), self._epoch, []
        for k in range(self._next, self._next + _PREFETCH_SLICES):
            if k >= count:  # the next epoch's first slices follow this one's last
                if not self.repeat or count == 0:
                    break
                epoch, k = self._epoch + 1, k - count
                if k >= count:
                    break
            slice_id = self._slice_at(epoch, k)  # k: a position in this worker's own plan
            shard = self.slice_bounds(slice_id)[0]
            if shard not in ahead:
                ahead.append(shard)
        self.dataset.prefetch(ahead)  # type: ignore[attr-defined]  # optional, checked above

    def left_total(self) -> int:
        """Samples of an elastic restore's leftover this reader delivers (0 without one)."""
        return 0 if self._left is None else self._left.total()

    def _read(
        self, shard_id: int, position: int, end: int, epoch: int | None = None
    ) -> dict[str, Any]:
        chunk = self._chunks.get((shard_id, position))
        if chunk is None:
            stop = min(end, position + _CHUNK)
            loaded = self.dataset.read_range(shard_id, position, stop)
            for offset, item in enumerate(loaded):
                self._chunks[(shard_id, position + offset)] = item
            chunk = self._chunks[(shard_id, position)]
        del self._chunks[(shard_id, position)]
        key, parts = chunk
        return self._raw(key, parts, shard_id, position, self._epoch if epoch is None else epoch)

    def _raw(
        self, key: str, parts: dict[str, bytes], shard_id: int, index: int, epoch: int
    ) -> dict[str, Any]:
        return {
            "__key__": key,
            "__restore_key__": SampleKey(self.leaf_id, shard_id, index, epoch),
            "__shard__": self.dataset.shard_names[shard_id],
            **parts,
        }

    def fetch(self, restore_key: Any) -> dict[str, Any]:
        if not isinstance(restore_key, SampleKey) or restore_key.leaf != self.leaf_id:
            raise StateError(
                f"Reader(leaf {self.leaf_id}): not a restore key of mine: {short_repr(restore_key)}"
            )
        shard_id, index = restore_key.shard, restore_key.sample
        if not 0 <= shard_id < len(self.dataset.shard_names):
            raise StateError(f"Reader(leaf {self.leaf_id}): no shard {shard_id} in {restore_key}")
        try:
            key, parts = self.dataset.read(shard_id, index)
        except IndexError as exc:  # a key no reader of this dataset can have made
            raise StateError(f"Reader(leaf {self.leaf_id}): {restore_key}: {exc}") from None
        return self._raw(key, parts, shard_id, index, restore_key.epoch)

    def _reset(self) -> None:
        self._chunks: dict[tuple[int, int], tuple[str, dict[str, Any]]] = {}
        self._epoch, self._next, self._open, self._done = self.start_epoch, 0, [], False
        self._rng = CounterRng(self.seed, "interleave", self.leaf_id, self.worker_index)
        self._left = None
        self.dealing = self.fresh_dealing

    def _save(self) -> dict[str, Any]:
        state = {
            "epoch": self._epoch,
            "next": self._next,
            "open": [list(entry) for entry in self._open],
            "rng": self._rng.counter,
            "done": self._done,
            "dealing": self.dealing,
        }
        if self._left is not None:
            state["left"] = self._left.save()
        return state

    def _restore(self, state: dict[str, Any]) -> None:
        self._reset()
        dealing = state["dealing"]
        if dealing not in DEALINGS:
            raise StateError(f"Reader: dealing {short_repr(dealing)} is not one of {DEALINGS}")
        self.dealing = dealing
        self._bounds_cache.clear()
        self._epoch = state_count(state["epoch"], "Reader epoch")
        self._next = state_count(state["next"], "Reader next")
        self._rng.counter = state_count(state["rng"], "Reader rng")
        self._done = bool(state["done"])
        opened = state["open"]
        if not isinstance(opened, list) or len(opened) > self.open_slices:
            raise StateError(
                f"Reader: {short_repr(opened)} is not a list of at most {self.open_slices} open "
                "slices; was it saved with another parallel_shard_iters?"
            )
        past = self.table().past_end(self._next, self.worker_index)
        if past is not None:
            raise StateError(f"Reader: {past}; the state belongs to another layout")
        for entry in opened:
            if not isinstance(entry, list) or len(entry) != 2:
                raise StateError(f"Reader: open slice {short_repr(entry)} is not [slice, position]")
            slice_id, position = (state_count(x, "Reader open slice") for x in entry)
            outside = self.open_slice_error(slice_id, position)
            if outside is not None:
                raise StateError(f"Reader: {outside}")
            self._open.append([slice_id, position])
        if state.get("left") is not None:
            self._left = Leftover(self, state["left"])
            if self._done:  # the leftover is all this reader still delivers
                self._next = self.worker_slice_count()
