"""Which samples of a split each global worker owns: Energon's dealing by sample ranges.

A split is a sequence of *sample ranges* (the Source's runs: consecutive samples of one
shard). Their samples, concatenated in order, are numbered ``0 .. N-1``. The ``G`` global
workers (ranks x workers per rank) each own one contiguous range of those numbers, possibly
spanning shard boundaries:

1. every worker gets ``N // G`` samples and ``N % G`` of them one more: the workers
   ``rotation, rotation + 1, ...`` (mod ``G``), where ``rotation`` is the samples of the
   leaves before this one in a metadataset (mod ``G``), so that a blend of small leaves
   does not give its extra samples to the same workers every time;
2. those counts are placed by a generalized bit reversal of the worker ids, which spreads
   the workers with one more sample evenly over ranks (for 4 workers: 0, 2, 1, 3);
3. worker ``g`` owns the ``g``-th range of the counts laid end to end.

So every worker owns samples whenever ``N >= G``, whatever ``max_samples_per_sequence``;
the Reader cuts each worker's range into sequences afterwards
(:mod:`energon_lite.stages.slices`). The counts are Megatron-Energon's (``Sharder``); the
functions are pure and cheap (O(G) and O(ranges)).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


@lru_cache(maxsize=64)
def bit_reversal_order(n: int) -> tuple[int, ...]:
    """The generalized bit reversal of ``range(n)``: the halves' orders, interleaved
    (``n = 8``: 0, 4, 2, 6, 1, 5, 3, 7)."""
    return _interleave(tuple(range(n)))


def _interleave(ids: tuple[int, ...]) -> tuple[int, ...]:
    if len(ids) <= 2:
        return ids
    left, right = _interleave(ids[: len(ids) // 2]), _interleave(ids[len(ids) // 2 :])
    out: list[int] = []
    for i in range(len(right)):  # right is never shorter than left
        if i < len(left):
            out.append(left[i])
        out.append(right[i])
    return tuple(out)


def worker_sample_counts(total: int, workers: int, rotation: int = 0) -> np.ndarray:
    """Samples each of ``workers`` global workers owns of a split of ``total`` samples."""
    if workers < 1 or total < 0:
        raise ValueError(f"cannot deal {total=} samples to {workers=}")
    base, extra = divmod(total, workers)
    linear = np.full(workers, base, dtype=np.int64)
    linear[(np.arange(workers) - rotation) % workers < extra] += 1
    counts = np.empty(workers, dtype=np.int64)
    counts[list(bit_reversal_order(workers))] = linear
    return counts


def worker_bounds(total: int, workers: int, rotation: int = 0) -> np.ndarray:
    """``workers + 1`` sample numbers: worker ``g`` owns ``[bounds[g], bounds[g + 1])``."""
    counts = worker_sample_counts(total, workers, rotation)
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def deal_ranges(
    starts: np.ndarray, ends: np.ndarray, worker: int, workers: int, rotation: int = 0
) -> list[tuple[int, int, int]]:
    """The parts of the sample ranges ``[starts[i], ends[i])`` that global worker ``worker``
    of ``workers`` owns, as ``(range index, start, end)`` in order (empty when the split has
    fewer samples than workers and this one is among those without)."""
    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(ends - starts)]).astype(np.int64)
    bounds = worker_bounds(int(cum[-1]), workers, rotation)
    first, last = int(bounds[worker]), int(bounds[worker + 1])
    out = []
    for i in range(int(np.searchsorted(cum, first, side="right")) - 1, len(starts)):
        begin, end = max(first, int(cum[i])), min(last, int(cum[i + 1]))
        if begin >= last:
            break
        if begin < end:
            offset = int(starts[i]) - int(cum[i])
            out.append((i, begin + offset, end + offset))
    return out
