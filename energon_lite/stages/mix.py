"""How a ``WeightedBlend`` picks its sources.

* ``draw(rng, weights)``: one source drawn by weight (one draw of a ``CounterRng``).
* ``energon_draw(rng, cdf)``: one source drawn as Energon's ``BlendDataset`` draws it (one
  float32 draw of Energon's worker stream, ``TorchStreamRng``, over float32 cumulative
  weights), so that a blend delivers Energon's counts.
* ``plan_batch``: a composed batch's sources, planned when the batch starts.
* ``largest_remainder(n, weights)``: ``n`` slots split in proportion to ``weights``, each
  source its floor, the leftover slots to the largest remainders (ties: the lower index).
  A ``stratified`` batch holds exactly these counts.
* ``deficit_choice(targets, tally)``: ``weight_unit: tokens``. The source whose delivered
  cost lags its target share the most: ``argmax target_i * total - cost_i``, with the cost of
  samples drawn but not costed yet (in the buffers before the cost is known) estimated at
  the source's mean so far. No chance involved, so the delivered shares track the targets
  within a few samples' cost.
* The costs the ``Cost`` stage (after ``Encode``) reports, per leaf, reach the blend through
  its chain's context (``ChainContext.costs``), for it to add to its tally on its next draw.
  Reports arrive in the order of the stream, so a restored chain sees them at the same draws
  as the original.
* ``loader_step(base, index)``: the training step a worker's blend is drawing for: ``base`` (the
  steps delivered before an elastic restore) plus the rank's batch index of the batch being
  filled (the worker's count spread as ``local * workers + worker``, the order in which the
  loader hands batches out, the same on every rank).
"""

from __future__ import annotations

import bisect
import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from energon_lite.errors import ConfigError
from energon_lite.rng import CounterRng, TorchStreamRng
from energon_lite.task_encoder.hook_index import HookIndex


def draw(rng: CounterRng | TorchStreamRng, weights: Sequence[float]) -> int:
    """Index drawn with probability ``weights[i] / sum(weights)`` (one draw of ``rng``)."""
    target = rng.random() * sum(weights)
    for index, weight in enumerate(weights):
        if target < weight:
            return index
        target -= weight
    return max(i for i, w in enumerate(weights) if w > 0)  # float round-off at the top end


def float32_cumsum(weights: Sequence[float]) -> list[float]:
    """The cumulative weights as Energon sums them (float32), as Python floats."""
    return [float(x) for x in np.cumsum(np.asarray(weights, dtype=np.float32))]


def energon_draw(rng: TorchStreamRng, cdf: list[float]) -> int:
    """Index drawn as Energon's blend draws it: one float32 draw times the float32 total
    (the product rounded to float32), the first cumulative weight above it, so a weight of
    0 is never drawn (a product rounded up to the total, where Energon's index would run
    past the end, takes the last dataset with a weight)."""
    target = _F32.unpack(_F32.pack(rng.random() * cdf[-1]))[0]
    index = bisect.bisect_right(cdf, target)
    if index == len(cdf):
        index = bisect.bisect_left(cdf, cdf[-1])
    return index


_F32 = struct.Struct("f")  # packing rounds a float to float32 (to nearest)


def largest_remainder(n: int, weights: Sequence[float]) -> list[int]:
    """``n`` split in proportion to ``weights`` (sum > 0), by largest remainder."""
    total = sum(weights)
    exact = [n * w / total for w in weights]
    counts = [math.floor(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


def deficit_choice(targets: Sequence[float], tally: Sequence[list[float]]) -> int:
    """The live source (target > 0) furthest below its share of the cost so far.
    ``tally[i] = [drawn, costed, cost]``."""
    known = [t[2] for t in tally if t[1] > 0]
    counted = sum(t[1] for t in tally)
    prior = sum(known) / counted if counted else 1.0
    estimated = []
    for drawn, costed, cost in tally:
        mean = cost / costed if costed else prior
        estimated.append(cost + (drawn - costed) * mean)
    total = sum(estimated)
    weight_sum = sum(targets)
    best, best_gap = -1, -math.inf
    for i, target in enumerate(targets):
        if target <= 0:
            continue
        gap = target / weight_sum * total - estimated[i]
        if gap > best_gap:
            best, best_gap = i, gap
    return best


COMPOSITIONS = ("random", "stratified", "per_source")


def check_options(composition: str, batch_size: int | None, by_cost: bool) -> None:
    """A weighted blend's composition, batch size and cost steering fit together."""
    if composition not in COMPOSITIONS:
        raise ConfigError(f"WeightedBlend: {composition=}; allowed: {list(COMPOSITIONS)}")
    if composition != "random" and (batch_size is None or batch_size < 1):
        raise ConfigError(
            f"batch_composition {composition!r} shapes batches: it needs batch_size >= 1, "
            f"got {batch_size=}"
        )
    if by_cost and composition != "random":
        raise ConfigError(
            f"weight_unit: tokens steers every draw by cost; it cannot also make "
            f"{composition!r} batches (use batch_composition: random with it)"
        )


def plan_batch(
    rng: CounterRng | TorchStreamRng, composition: str, size: int, live: Sequence[float]
) -> list[int]:
    """The sources of one composed batch, in the order they are drawn (last first):
    ``stratified``, the largest-remainder counts in an order drawn at random (``size``
    draws); ``per_source``, one source drawn by weight."""
    if composition == "per_source":
        return [draw(rng, live)] * size
    left = [float(n) for n in largest_remainder(size, live)]
    order = []
    for _ in range(size):
        index = draw(rng, left)
        left[index] -= 1
        order.append(index)
    return order[::-1]


def loader_step(base: int, index: HookIndex) -> int:
    """The step of the batch being filled, from the chain's ``index`` (see the module
    docstring)."""
    local = index.batch
    return base + (0 if local is None else local * index.workers + index.worker)


def plain_tally(tally: Any, sources: int, where: str) -> list[list[float]]:
    """A saved tally checked: one ``[drawn, costed, cost]`` per source."""
    from energon_lite.errors import StateError

    ok = isinstance(tally, list) and len(tally) == sources
    ok = ok and all(
        isinstance(t, list)
        and len(t) == 3
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in t)
        for t in tally
    )
    if not ok:
        raise StateError(
            f"{where}: tally {tally!r} is not one [drawn, costed, cost] per source "
            f"({sources}); the state is corrupt"
        )
    return [[int(t[0]), int(t[1]), float(t[2])] for t in tally]
