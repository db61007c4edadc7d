"""Rank-synchronised bucket choice: every data-parallel rank emits the same bucket at a step.

``choose_bucket(seed, step, weights)`` is a pure function, so ranks agree without talking;
``BucketSync`` carries the settings of one worker chain into ``GroupBatch``. Video-text
buckets (``energon_lite.flavors.video_text.buckets``) give the weights; any hashable,
msgpack-able bucket keys work.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import msgpack

from energon_lite.errors import ConfigError
from energon_lite.rng import derive_seed
from energon_lite.task_encoder.base import TaskEncoder
from energon_lite.worker import WorkerSlot


@dataclass(frozen=True)
class BucketSync:
    """Settings of the synchronised mode for one worker chain."""

    weights: Mapping[Hashable, float]
    seed: int
    worker_id: int = 0
    num_workers: int = 1
    max_buffered: int = 10_000

    @staticmethod
    def check_option(option: Any, task_encoder: TaskEncoder) -> None:
        """Validate ``get_train_dataset(bucket_sync=...)`` early, in the main process."""
        if option is None:
            return
        if not task_encoder.overrides("batch_group_criterion"):
            raise ConfigError(
                "bucket_sync needs a TaskEncoder that overrides batch_group_criterion"
            )
        shape_ok = isinstance(option, Mapping) and isinstance(option.get("weights"), Mapping)
        if not shape_ok or set(option) - {"weights", "max_buffered"}:
            raise ConfigError(
                f"bucket_sync={option!r} must be a dict with 'weights': {{bucket_key: weight}} "
                "and optionally 'max_buffered': int"
            )
        choose_bucket(0, 0, option["weights"])  # raises ConfigError naming a bad weight

    @staticmethod
    def for_slot(option: Mapping[str, Any] | None, slot: WorkerSlot) -> BucketSync | None:
        """The settings of one worker chain; every rank's worker w draws the same steps."""
        if option is None:
            return None
        return BucketSync(
            seed=slot.seed, worker_id=slot.worker_id, num_workers=slot.num_workers, **option
        )


def choose_bucket(seed: int, step: int, weights: Mapping[Hashable, float]) -> Hashable:
    """The bucket for global step ``step``, drawn with probability ``weight / sum(weights)``.

    A pure function of its arguments: every rank computing it for the same step gets the same
    bucket, so all ranks' batches of a step share a shape (Open-Sora's synchronised sampler).
    Keys must be msgpack-able; they are put in a canonical order (by their msgpack bytes)
    first, so the dict's insertion order does not matter. Weights usually come from
    :meth:`BucketConfig.weights`. Zero weights are never chosen.
    """
    canonical = []
    for key, weight in weights.items():
        if not (isinstance(weight, (int, float)) and math.isfinite(weight) and weight >= 0):
            raise ConfigError(f"weights[{key!r}]={weight!r} must be a finite number >= 0")
        if weight > 0:
            canonical.append((msgpack.packb(key, use_bin_type=True), key, float(weight)))
    if not canonical:
        raise ConfigError(f"choose_bucket needs at least one weight > 0, got {dict(weights)!r}")
    canonical.sort(key=lambda c: c[0])
    total = math.fsum(c[2] for c in canonical)
    u = (derive_seed(seed, "choose_bucket", int(step)) >> 11) * 2.0**-53 * total
    acc = 0.0
    for _, key, weight in canonical:
        acc += weight
        if u < acc:
            return key
    return canonical[-1][1]  # u rounded up to the float total
