"""``EpisodePool``: the ``pool`` sampling mode, one stage per global worker.

Algorithm. Epoch ``e`` of rank ``r`` has a pool of ``episodes_per_epoch`` episodes,
``round(episodes_per_epoch * positive_ratio)`` of them positive, drawn without replacement
by ``rng_for(seed, "pool", e, r)`` - a hash of the whole key, so no two (epoch, rank)
pairs share a stream (``epoch_seed + rank * 1000`` made rank r at epoch e + 1000 equal to
rank r + 1 at epoch e). The rank draws ``steps_per_epoch * batch_size`` start frames per
epoch, uniformly over every frame of its pool; its ``num_workers`` workers split them in
whole batches (worker ``w`` gets ``share(steps_per_epoch, num_workers, w)`` batches), and
draw ``k`` of worker ``g`` in epoch ``e`` is ``CounterRng(seed, "pool-draws", e, g)`` number
``k``, mapped to (episode, frame) by a binary search over the pool's cumulative lengths.
When a worker has used up its draws it moves to epoch ``e + 1`` and builds that pool
itself; nothing has to be called from the main process.

``first_epoch`` (the loader passes its pass number) and ``num_epochs`` bound a finite run;
by default the stream is endless.

State: ``{"epoch", "position"}`` - two integers; the pool and the draws are recomputed.
A draw whose transition cannot be read is logged and skipped (``failure_tolerance``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from energon_lite.errors import ConfigError, FailureTracker
from energon_lite.flavors.episodes.cursor import EpochCursor
from energon_lite.flavors.episodes.index import EpisodeIndex
from energon_lite.flavors.episodes.partition import local_worker, share
from energon_lite.flavors.episodes.transitions import TransitionBuilder
from energon_lite.rng import CounterRng, rng_for


def choose_pool(
    index: EpisodeIndex,
    seed: int,
    epoch: int,
    rank: int,
    episodes_per_epoch: int,
    positive_ratio: float,
) -> np.ndarray:
    """The sorted episode ids of rank ``rank``'s pool in ``epoch``."""
    if not 0.0 <= positive_ratio <= 1.0:
        raise ConfigError(f"{positive_ratio=} must be in [0, 1]")
    if not 1 <= episodes_per_epoch <= len(index):
        raise ConfigError(
            f"{episodes_per_epoch=} must be in [1, {len(index)}] (the episodes in the index)"
        )
    n_pos = int(np.floor(episodes_per_epoch * positive_ratio + 0.5))
    n_neg = episodes_per_epoch - n_pos
    positives = np.flatnonzero(index.labels)
    negatives = np.flatnonzero(~index.labels)
    if n_pos > len(positives) or n_neg > len(negatives):
        raise ConfigError(
            f"{episodes_per_epoch=} with {positive_ratio=} needs {n_pos} positive and {n_neg} "
            f"negative episodes, but {index.root} has {len(positives)} and {len(negatives)} "
            "(label: the file attribute 'success'); lower episodes_per_epoch or change positive_ratio"
        )
    rng = rng_for(seed, "pool", epoch, rank)
    chosen = [
        rng.choice(positives, n_pos, replace=False),
        rng.choice(negatives, n_neg, replace=False),
    ]
    return np.sort(np.concatenate(chosen))


def pool_stats(index: EpisodeIndex, pool: np.ndarray) -> dict[str, Any]:
    """The Q-chunking loader's ``get_stats()`` for one pool."""
    return {
        "total_possible_starts": int(index.lengths[pool].sum()),
        "loaded_episodes": len(pool),
        "positive_ratio": float(index.labels[pool].mean()) if len(pool) else 0.0,
    }


class EpisodePool(EpochCursor):
    """Transitions drawn uniformly from a per-(epoch, rank) pool of episodes."""

    mismatch_hint = "the state was saved with other steps_per_epoch/batch_size/workers"

    def __init__(
        self,
        builder: TransitionBuilder,
        seed: int,
        global_worker_id: int,
        num_global_workers: int,
        rank: int,
        world_size: int,
        *,
        episodes_per_epoch: int,
        positive_ratio: float,
        steps_per_epoch: int,
        batch_size: int,
        first_epoch: int = 0,
        num_epochs: int | None = None,
        failure_tolerance: int = 10,
    ) -> None:
        worker_id, num_workers = local_worker(
            global_worker_id, num_global_workers, rank, world_size
        )
        if steps_per_epoch < 1 or batch_size < 1:
            raise ConfigError(f"{steps_per_epoch=} and {batch_size=} must be >= 1")
        self.builder = builder
        self.index = builder.index
        self.seed, self.rank, self.global_worker_id = int(seed), rank, global_worker_id
        self.episodes_per_epoch, self.positive_ratio = episodes_per_epoch, positive_ratio
        self.num_epochs = num_epochs
        self.samples_per_epoch = share(steps_per_epoch, num_workers, worker_id) * batch_size
        self.first_epoch = first_epoch
        self._tracker = FailureTracker(failure_tolerance)
        builder.reader.cache_episodes = max(builder.reader.cache_episodes, episodes_per_epoch)
        self.pool(0)  # validate the pool settings now, not in a worker

    def pool(self, epoch: int) -> np.ndarray:
        """This rank's pool of episode ids in ``epoch``."""
        return choose_pool(
            self.index, self.seed, epoch, self.rank, self.episodes_per_epoch, self.positive_ratio
        )

    def _enter(self, epoch: int, position: int) -> None:
        self.epoch = epoch
        self._pool = self.pool(epoch)
        if self.builder.reader.frame_cache is not None:  # memory follows the pool
            self.builder.reader.frame_cache.retain(self._pool.tolist())
        self.builder.enter_pool(self._pool.tolist(), epoch)  # with shared_pool: one copy per rank
        self._cum = np.cumsum(self.index.lengths[self._pool])
        self._rng = CounterRng(
            self.seed, "pool-draws", epoch, self.global_worker_id, counter=position
        )

    def next(self) -> dict[str, Any]:
        self._start_if_fresh()
        while True:
            if self.num_epochs is not None and self.epoch >= self.first_epoch + self.num_epochs:
                raise StopIteration
            if self.samples_per_epoch == 0:
                raise StopIteration  # more workers than batches per epoch: this one idles
            if self._rng.counter >= self.samples_per_epoch:
                self._enter(self.epoch + 1, 0)
                continue
            draw = self._rng.integers(int(self._cum[-1]))
            slot = int(np.searchsorted(self._cum, draw, side="right"))
            start = draw - (int(self._cum[slot]) - int(self.index.lengths[self._pool[slot]]))
            item = self.builder.try_build(
                int(self._pool[slot]), start, self._tracker, raw_images=self.raw_images
            )
            if item is not None:
                return item

    def _position(self) -> int:
        return self._rng.counter

    def _positions_per_epoch(self) -> int:
        return self.samples_per_epoch
