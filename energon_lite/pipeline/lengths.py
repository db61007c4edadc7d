"""``len()`` of a dataset or loader: the samples each worker of a rank reads per epoch.

Energon counts a rank's length as the sum over its workers of ``ceil(samples / batch_size)``
(``floor`` with ``batch_drop_last``), where a worker's samples are:

* one dataset: the samples the worker is dealt in the epoch (here exact per epoch, also
  with ``shuffle_over_epochs_multiplier``, which may deal a slice twice);
* a weighted ``blend``: the sum of every leaf's samples dealt to the worker, weights and
  ``shuffle_over_epochs_multiplier`` left out (the blend itself never ends; the number says
  how many different samples one pass over the rank's share holds);
* ``blend_epochized``: what the worker emits in the epoch, each leaf's passes and the
  fraction of its last pass, rounded down per worker as Energon does
  (:mod:`energon_lite.quotas`), so ``len(loader)`` is the number of batches the epoch
  really has.

``DatasetPipeline.counted_samples`` applies these per worker; the wrapper classes count
with :func:`batches_per_worker` too.

Which samples a worker is dealt is the reader's dealing (:mod:`energon_lite.stages.slices`):
Energon's sample ranges (the same per-worker counts as Energon), or the earlier slice
dealing (:mod:`energon_lite.state.upgrade`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from energon_lite.quotas import PER_WORKER, exact_repetitions, pass_quotas, passes

if TYPE_CHECKING:
    from energon_lite.stages.reader import Reader


def dealt_samples(reader: Reader) -> int:
    """Samples of the reader's leaf that its worker owns in one unshuffled pass over its
    share, whatever the epoch and multiplier."""
    return reader.dealt_samples()


def epochized_samples(
    reader: Reader, repetitions: float, epoch: int, rounding: str = PER_WORKER
) -> int:
    """Samples the reader's worker emits in blend epoch ``epoch`` of ``blend_epochized``
    (``rounding``: :mod:`energon_lite.quotas`)."""
    reps = exact_repetitions(repetitions)
    first = epoch * passes(reps)

    def counts(number: int) -> list[int]:
        return reader.samples_per_worker(first + number).tolist()

    return sum(pass_quotas(reps, counts, reader.worker_index, epoch, rounding))


def read_samples(reader: Reader, epoch: int) -> int:
    """Samples the reader's worker reads of its leaf in reader epoch ``epoch``."""
    return int(reader.samples_per_worker(epoch)[reader.worker_index])


def batches_per_worker(per_worker: list[int], batch_size: int | None, drop_last: bool) -> list[int]:
    """Each worker's batches: it batches its own items (its last batch may be short)."""
    if batch_size is None:
        return list(per_worker)
    if drop_last:
        return [n // batch_size for n in per_worker]
    return [-(-n // batch_size) for n in per_worker]
