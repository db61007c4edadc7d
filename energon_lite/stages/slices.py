"""A leaf's *slices* (sequences of at most ``max_samples_per_sequence`` consecutive samples
of one run) and which global worker reads which slice in which epoch: the two dealings.

* ``ranges`` (the default since states carry a ``dealing`` field): each global worker owns a
  contiguous range of the split's samples (:mod:`energon_lite.stages.dealing`, Energon's
  dealing), cut into slices at run boundaries and every ``max_samples_per_sequence``
  samples. Slice ids number worker 0's slices first, then worker 1's, ... In epoch ``e``
  worker ``g`` reads its own ``k`` slices in the order of a keyed permutation of them.
* ``slices`` (the dealing states saved before the ``dealing`` field are given at load,
  :mod:`energon_lite.state.upgrade`): the runs are cut into slices
  independently of the workers, the epoch's order is a keyed permutation of all slice ids
  and worker ``g`` of ``G`` takes positions ``g, g + G, ...``. With few large slices some
  workers get none; kept so that older states continue exactly.

In both, ``shuffle_over_epochs_multiplier`` m >= 1 permutes m copies of the slices over m
epochs (each slice exactly m times per m epochs), -1 draws slices with replacement, None
keeps them in order. A table is a pure function of the dataset's runs, the settings and the
number of global workers, so the elastic restore can build the old layout's table to read
the old workers' unfinished work. Positions are per worker: ``slice_ids(epoch, g, p)`` is
the slice worker ``g`` reads at its ``p``-th position of ``epoch``.
"""

from __future__ import annotations

import numpy as np

from energon_lite.quotas import next_past_end, worker_slices
from energon_lite.rng import Permutation, derive_seed, mix_draws
from energon_lite.sources.base import Source
from energon_lite.stages.dealing import worker_bounds

DEALINGS = ("ranges", "slices")


class SliceTable:
    """Slices of one leaf for ``workers`` global workers under one dealing (see module)."""

    dealing = ""
    num_slices: int

    def __init__(
        self,
        dataset: Source,
        per_slice: int | None,
        workers: int,
        seed: int,
        leaf: int,
        multiplier: int | None,
    ) -> None:
        self.dataset, self.workers, self.seed, self.leaf = dataset, workers, seed, leaf
        self.multiplier = multiplier
        self.run_len = (dataset.run_end - dataset.run_start).astype(np.int64)
        self._perms: dict[tuple[int | str, ...], Permutation] = {}
        self.slice_len = int(per_slice or max(1, int(self.run_len.max(initial=1))))

    def _permutation(self, size: int, *key: int | str) -> Permutation:
        found = self._perms.get(key)
        if found is None:
            if len(self._perms) > 64:
                self._perms.clear()
            found = self._perms[key] = Permutation(size, self.seed, *key)
        return found

    # what every table answers ------------------------------------------------------------

    def extents(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """First and end sample (in its shard) of each slice in ``ids``."""
        raise NotImplementedError

    def shard_of(self, ids: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def worker_slices(self, worker: int) -> int:
        """Slice positions worker ``worker`` reads per epoch."""
        raise NotImplementedError

    def slice_ids(self, epoch: int, worker: int, positions: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def samples_per_worker(self, epoch: int) -> np.ndarray:
        """Samples each global worker reads in ``epoch``."""
        raise NotImplementedError

    def dealt(self, worker: int) -> int:
        """Samples worker ``worker`` owns in the unshuffled order (one pass over its share)."""
        raise NotImplementedError

    def worker_offsets(self, worker: int) -> list[int]:
        """The sample numbers (in the split's order) that bound worker ``worker``'s slices,
        ``[start, ..., end]`` (Energon's ``workers_slice_offsets`` of one worker)."""
        raise NotImplementedError(f"the {self.dealing!r} dealing has no per-worker ranges")

    def bounds(self, slice_id: int) -> tuple[int, int, int]:
        """``(shard_id, start, end)`` of a slice."""
        ids = np.asarray([slice_id], dtype=np.int64)
        starts, ends = self.extents(ids)
        return int(self.shard_of(ids)[0]), int(starts[0]), int(ends[0])

    def past_end(self, next_slice: int, worker: int) -> str | None:
        """Why a saved Reader ``next`` is outside worker ``worker``'s epoch, or None."""
        return next_past_end(next_slice, self.num_slices, worker, self.workers)

    def open_error(self, slice_id: int, position: int) -> str | None:
        """Why an open slice ``[slice_id, position]`` is outside this leaf's plan, or None."""
        if not 0 <= slice_id < self.num_slices:
            return f"slice {slice_id} outside this dataset's {self.num_slices}"
        _, start, end = self.bounds(slice_id)
        if not start <= position < end:
            return f"position {position} outside slice {slice_id} [{start}, {end})"
        return None

    def _sizes(self, ids: np.ndarray) -> np.ndarray:
        starts, ends = self.extents(ids)
        return ends - starts


class RoundRobinSlices(SliceTable):
    """The ``slices`` dealing: global slices, positions ``g, g + G, ...`` (see module)."""

    dealing = "slices"

    def __init__(
        self,
        dataset: Source,
        per_slice: int | None,
        workers: int,
        seed: int,
        leaf: int,
        multiplier: int | None,
    ) -> None:
        super().__init__(dataset, per_slice, workers, seed, leaf, multiplier)
        self.run_slices = np.concatenate([[0], np.cumsum(-(-self.run_len // self.slice_len))])
        self.run_slices = self.run_slices.astype(np.int64)
        self.num_slices = int(self.run_slices[-1])

    def _run_of(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.run_slices, ids, side="right") - 1

    def extents(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(ids, dtype=np.int64)
        run = self._run_of(ids)
        ds = self.dataset
        starts = ds.run_start[run] + (ids - self.run_slices[run]) * self.slice_len
        return starts, np.minimum(starts + self.slice_len, ds.run_end[run])

    def shard_of(self, ids: np.ndarray) -> np.ndarray:
        return np.asarray(self.dataset.run_shard)[self._run_of(np.asarray(ids, dtype=np.int64))]

    def worker_slices(self, worker: int) -> int:
        return worker_slices(self.num_slices, worker, self.workers)

    def slice_ids(self, epoch: int, worker: int, positions: np.ndarray) -> np.ndarray:
        positions = worker + np.asarray(positions, dtype=np.int64) * self.workers
        return self.global_ids(epoch, positions)

    def global_ids(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        """The slice ids at ``positions`` of ``epoch``'s global slice order."""
        n, m = self.num_slices, self.multiplier
        positions = np.asarray(positions, dtype=np.int64)
        if m is None:
            return positions
        if m == -1:  # with replacement
            key = derive_seed(self.seed, "slice-draw", self.leaf, epoch)
            return (mix_draws(key, positions) % np.uint64(n)).astype(np.int64)
        permutation = self._permutation(n * m, "slices", self.leaf, epoch // m)
        return permutation.many((epoch % m) * n + positions) % n

    def samples_per_worker(self, epoch: int) -> np.ndarray:
        """O(runs), not O(slices): every slice holds ``slice_len`` samples except the last
        one of a run (its tail); where a tail lands in the epoch's order comes from the
        inverse permutation. With replacement the draws are counted in chunks."""
        n, workers, per_slice = self.num_slices, self.workers, self.slice_len
        if self.multiplier == -1:
            return self._drawn(epoch)
        first = np.arange(workers, dtype=np.int64)
        counts = np.maximum(0, -(-(n - first) // workers)) * per_slice
        short = (self.run_len % per_slice) > 0
        tail_ids = self.run_slices[1:][short] - 1
        missing = per_slice - self.run_len[short] % per_slice
        if tail_ids.size == 0:
            return counts
        m = self.multiplier
        if m is None:
            positions, lacking = tail_ids, missing
        else:  # the cycle of m epochs holds each slice m times: keep the ones in this epoch
            permutation = self._permutation(n * m, "slices", self.leaf, epoch // m)
            cycle = permutation.inverse_many(np.concatenate([tail_ids + k * n for k in range(m)]))
            positions = cycle - (epoch % m) * n
            inside = (positions >= 0) & (positions < n)
            positions, lacking = positions[inside], np.tile(missing, m)[inside]
        counts -= np.bincount(positions % workers, weights=lacking, minlength=workers).astype(
            np.int64
        )
        return counts

    def _drawn(self, epoch: int, chunk: int = 1 << 18) -> np.ndarray:
        counts = np.zeros(self.workers, dtype=np.int64)
        for begin in range(0, self.num_slices, chunk):
            positions = np.arange(begin, min(begin + chunk, self.num_slices), dtype=np.int64)
            sizes = self._sizes(self.global_ids(epoch, positions))
            counts += np.bincount(
                positions % self.workers, weights=sizes, minlength=self.workers
            ).astype(np.int64)
        return counts

    def dealt(self, worker: int) -> int:
        g, workers, per_slice = worker, self.workers, self.slice_len
        count = max(0, -(-(self.num_slices - g) // workers)) * per_slice
        short = (self.run_len % per_slice) > 0
        tails = self.run_slices[1:][short] - 1
        missing = per_slice - self.run_len[short] % per_slice
        return int(count - missing[tails % workers == g].sum())


class RangeSlices(SliceTable):
    """The ``ranges`` dealing: each worker's own sample range, cut into slices (see module)."""

    dealing = "ranges"

    def __init__(
        self,
        dataset: Source,
        per_slice: int | None,
        workers: int,
        seed: int,
        leaf: int,
        multiplier: int | None,
        rotation: int = 0,
    ) -> None:
        super().__init__(dataset, per_slice, workers, seed, leaf, multiplier)
        cum = np.concatenate([[0], np.cumsum(self.run_len)]).astype(np.int64)
        self.share_bounds = worker_bounds(int(cum[-1]), workers, rotation % workers)
        # pieces: the samples between consecutive run and worker boundaries
        cuts = np.concatenate([cum, self.share_bounds])  # np.unique, without its hashing:
        cuts.sort(kind="stable")  # two sorted runs merge in one pass
        cuts = cuts[np.concatenate([[True], cuts[1:] != cuts[:-1]])]
        self.piece_start, piece_end = cuts[:-1], cuts[1:]
        self.piece_end = piece_end
        self.piece_run = np.searchsorted(cum, self.piece_start, side="right") - 1
        self.cum = cum
        if per_slice is None and len(self.piece_start):
            self.slice_len = max(1, int((piece_end - self.piece_start).max()))
        per_piece = -(-(piece_end - self.piece_start) // self.slice_len)
        self.piece_first = np.concatenate([[0], np.cumsum(per_piece)]).astype(np.int64)
        self.num_slices = int(self.piece_first[-1])
        first_piece = np.searchsorted(self.piece_start, self.share_bounds, side="left")
        self.worker_first = self.piece_first[first_piece]

    def _piece_of(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.piece_first, ids, side="right") - 1

    def extents(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(ids, dtype=np.int64)
        piece = self._piece_of(ids)
        begin = self.piece_start[piece] + (ids - self.piece_first[piece]) * self.slice_len
        end = np.minimum(begin + self.slice_len, self.piece_end[piece])
        run = self.piece_run[piece]
        offset = self.dataset.run_start[run] - self.cum[run]  # sample number -> shard index
        return begin + offset, end + offset

    def shard_of(self, ids: np.ndarray) -> np.ndarray:
        piece = self._piece_of(np.asarray(ids, dtype=np.int64))
        return np.asarray(self.dataset.run_shard)[self.piece_run[piece]]

    def worker_slices(self, worker: int) -> int:
        return int(self.worker_first[worker + 1] - self.worker_first[worker])

    def past_end(self, next_slice: int, worker: int) -> str | None:
        count = self.worker_slices(worker) if 0 <= worker < self.workers else 0
        if next_slice > count:
            return (
                f"next slice {next_slice} is past the {count} slices global worker {worker} "
                f"of {self.workers} reads"
            )
        return None

    def slice_ids(self, epoch: int, worker: int, positions: np.ndarray) -> np.ndarray:
        k, m = self.worker_slices(worker), self.multiplier
        positions = np.asarray(positions, dtype=np.int64)
        if m is None:
            local = positions
        elif m == -1:  # with replacement, from this worker's own slices
            key = derive_seed(self.seed, "range-draw", self.leaf, self.workers, worker, epoch)
            local = (mix_draws(key, positions) % np.uint64(max(k, 1))).astype(np.int64)
        else:
            cycle = epoch // m
            permutation = self._permutation(k * m, "ranges", self.leaf, self.workers, worker, cycle)
            local = permutation.many((epoch % m) * k + positions) % max(k, 1)
        return self.worker_first[worker] + local

    def samples_per_worker(self, epoch: int) -> np.ndarray:
        """O(pieces x m) with a multiplier m > 1: each of a worker's ``k`` positions holds
        ``slice_len`` samples except the short last slice of a piece (its tail); where a
        tail lands in the cycle comes from the inverse permutation. With replacement the
        draws are counted (O(slices))."""
        counts = np.diff(self.share_bounds)
        m = self.multiplier
        if m in (None, 1):
            return counts  # each of a worker's slices once per epoch
        if m == -1:
            return np.asarray(
                [
                    int(
                        self._sizes(
                            self.slice_ids(epoch, g, np.arange(self.worker_slices(g)))
                        ).sum()
                    )
                    for g in range(self.workers)
                ],
                dtype=np.int64,
            )
        piece_len = self.piece_end - self.piece_start
        short = piece_len % self.slice_len > 0
        tails = self.piece_first[1:][short] - 1
        missing = self.slice_len - piece_len[short] % self.slice_len
        owner = np.searchsorted(self.worker_first, tails, side="right") - 1
        out = np.zeros(self.workers, dtype=np.int64)
        for g in range(self.workers):
            k = self.worker_slices(g)
            mine = owner == g
            local = tails[mine] - self.worker_first[g]
            lacking = 0
            if local.size:
                key = ("ranges", self.leaf, self.workers, g, epoch // m)
                cycle = self._permutation(k * m, *key).inverse_many(
                    np.concatenate([local + c * k for c in range(m)])
                )
                positions = cycle - (epoch % m) * k
                inside = (positions >= 0) & (positions < k)
                lacking = int(np.tile(missing[mine], m)[inside].sum())
            out[g] = k * self.slice_len - lacking
        return out

    def dealt(self, worker: int) -> int:
        return int(self.share_bounds[worker + 1] - self.share_bounds[worker])

    def worker_offsets(self, worker: int) -> list[int]:
        ids = np.arange(self.worker_first[worker], self.worker_first[worker + 1], dtype=np.int64)
        piece = self._piece_of(ids)
        begins = self.piece_start[piece] + (ids - self.piece_first[piece]) * self.slice_len
        return [int(b) for b in begins] + [int(self.share_bounds[worker + 1])]


def slice_table(
    dealing: str,
    dataset: Source,
    per_slice: int | None,
    workers: int,
    seed: int,
    leaf: int,
    multiplier: int | None,
    rotation: int = 0,
) -> SliceTable:
    """The slice table of one leaf under ``dealing`` for ``workers`` global workers."""
    if dealing == "ranges":
        return RangeSlices(dataset, per_slice, workers, seed, leaf, multiplier, rotation)
    if dealing == "slices":
        return RoundRobinSlices(dataset, per_slice, workers, seed, leaf, multiplier)
    raise ValueError(f"dealing {dealing!r} is not one of {DEALINGS}")
