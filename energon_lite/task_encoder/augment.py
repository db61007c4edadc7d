"""``AugmentTaskEncoder``: wraps another TaskEncoder and delegates to it (Energon's class).

Subclass it and override a hook to add work around the wrapped encoder's hook, e.g.
``def encode_sample(self, s): return extra(super().encode_sample(s))``.
"""

from __future__ import annotations

from typing import Any, Generic

from energon_lite.task_encoder.base import (
    T_batch,
    T_encoded_sample,
    T_raw_batch,
    T_sample,
    TaskEncoder,
)


class AugmentTaskEncoder(
    TaskEncoder[T_sample, T_encoded_sample, T_raw_batch, T_batch],
    Generic[T_sample, T_encoded_sample, T_raw_batch, T_batch],
):
    """Delegates ``decoder``, ``encode_sample``, ``batch`` and ``encode_batch`` to the wrapped
    encoder; the wrapped encoder's ``sample_rng`` follows the current sample as well."""

    def __init__(
        self, task_encoder: TaskEncoder[T_sample, T_encoded_sample, T_raw_batch, T_batch]
    ) -> None:
        self._task_encoder = task_encoder

    @property
    def decoder(self) -> Any:  # type: ignore[override]
        return self._task_encoder.decoder

    def encode_sample(self, sample: T_sample) -> T_encoded_sample:
        return self._task_encoder.encode_sample(sample)

    def batch(self, samples: list[T_encoded_sample]) -> T_raw_batch:
        return self._task_encoder.batch(samples)

    def encode_batch(self, batch: T_raw_batch) -> T_batch:
        return self._task_encoder.encode_batch(batch)

    def _set_sample_context(self, seed: int, restore_key: Any) -> None:
        super()._set_sample_context(seed, restore_key)
        self._task_encoder._set_sample_context(seed, restore_key)
