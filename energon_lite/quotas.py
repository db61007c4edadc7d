"""Exact per-epoch quotas of ``blend_epochized``, split over all global workers.

A leaf with repetitions ``r`` is read in ``ceil(r)`` *passes* per blend epoch. The first
``floor(r)`` passes are whole: every worker emits all the samples its reader owns in that
pass. A fraction ``f`` of a last pass is rounded one of two ways (``ROUNDINGS``):

* ``per_worker`` (Energon's ``RepeatDataset``, new runs): each worker emits
  ``floor(f * n)`` of its own ``n`` samples of the pass, so the epoch may hold up to one
  sample per worker less than ``floor(f * N)``;
* ``exact`` (states saved before the rounding was recorded): the workers' shares are split
  by largest remainder so that they sum to exactly ``floor(f * N)`` (``N``: the leaf's
  samples in that pass, all workers).

Every worker computes every worker's counts itself (slice ownership is a pure function of
seed, epoch and worker), so no communication is needed.

``share`` is the plain round-robin split of a count over workers (Energon's per-worker
share), used wherever a rank-wide count is dealt to its workers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction


def share(total: int, parts: int, part: int) -> int:
    """How many of ``total`` items part ``part`` of ``parts`` gets, dealt round robin (the
    first ``total % parts`` parts get one more): Energon's per-worker share of a count."""
    return total // parts + (1 if part < total % parts else 0)


def exact_repetitions(value: float) -> Fraction:
    """``value`` as an exact fraction (0.1 x 30 must give 3 samples, not 2)."""
    return Fraction(value).limit_denominator(10**6)


def passes(repetitions: Fraction) -> int:
    """Reader passes per blend epoch (at least 1, so reader epochs never collide)."""
    return max(1, math.ceil(repetitions))


PER_WORKER, EXACT = "per_worker", "exact"
ROUNDINGS = (PER_WORKER, EXACT)


def pass_quotas(
    repetitions: Fraction,
    counts: Callable[[int], Sequence[int]],
    worker: int,
    epoch: int,
    rounding: str = PER_WORKER,
) -> list[int]:
    """Samples global ``worker`` emits in each pass of one leaf in blend epoch ``epoch``.

    ``counts(k)`` gives every global worker's sample count in pass ``k``; ``rounding`` says
    how the fraction of a last pass is rounded (see the module).
    """
    whole = math.floor(repetitions)
    fraction = repetitions - whole
    plan = [int(counts(k)[worker]) for k in range(whole)]
    if fraction:
        plan.append(fraction_shares(counts(whole), fraction, epoch, rounding)[worker])
    return plan


def fraction_shares(
    counts: Sequence[int], fraction: Fraction, epoch: int, rounding: str
) -> list[int]:
    """Each worker's share of the fraction ``fraction`` of a pass in which the workers hold
    ``counts`` samples, under ``rounding``."""
    if rounding == PER_WORKER:
        return [math.floor(fraction * int(n)) for n in counts]
    if rounding == EXACT:
        return largest_remainder(counts, fraction, epoch)
    raise ValueError(f"rounding {rounding!r} is not one of {ROUNDINGS}")


def largest_remainder(counts: Sequence[int], fraction: Fraction, epoch: int) -> list[int]:
    """Split ``floor(fraction * sum(counts))`` over workers, each near ``fraction * count``.

    Each worker gets ``floor(fraction * n)`` and the leftover units (fewer than the number of
    workers) go to the largest remainders; ties rotate with the epoch so that no worker
    always takes the extra sample.
    """
    exact = [fraction * int(n) for n in counts]
    shares = [math.floor(x) for x in exact]
    extra = math.floor(fraction * sum(int(n) for n in counts)) - sum(shares)
    workers = len(counts)
    order = sorted(range(workers), key=lambda w: (-(exact[w] - shares[w]), (w - epoch) % workers))
    for worker in order[:extra]:
        shares[worker] += 1
    return shares


def worker_slices(num_slices: int, worker: int, workers: int) -> int:
    """How many of an epoch's ``num_slices`` slice positions global worker ``worker`` of
    ``workers`` reads (positions ``worker``, ``worker + workers``, ...)."""
    return max(0, -(-(num_slices - worker) // workers))


def next_past_end(next_slice: int, num_slices: int, worker: int, workers: int) -> str | None:
    """Why a saved Reader ``next`` is outside the epoch's plan, or None: the one rule the
    same-layout restore and the elastic restore (``energon_lite.resume.elastic``) share."""
    count = worker_slices(num_slices, worker, workers)
    if next_slice > count:
        return (
            f"next slice {next_slice} is past the {count} slices global worker {worker} of "
            f"{workers} reads of the leaf's {num_slices}"
        )
    return None
