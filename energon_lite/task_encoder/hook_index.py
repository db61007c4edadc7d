"""The indices Energon's ``TaskEncoder.current_batch_index`` / ``current_sample_index`` read.

One per process (a worker process runs one chain; in-process loading sets the worker fields
before every batch). The stages that call hooks set the counters right before each call,
from counters they keep in their state, so the values after a restore continue exactly:

* ``batch``: the worker's count of batches made so far (``Batch`` / ``GroupBatch``; without
  batching, ``Encode``'s count of ``encode_sample`` calls), so ``encode_sample`` sees the
  index of the batch its sample will be in;
* ``sample``: the calling stage's count of calls to its hook (``encode_sample``: per input
  sample, the outputs of a generator hook share it; ``batch`` / ``encode_batch``: per batch).

As in Energon both are per worker, spread over the rank's workers as
``local * num_workers + worker``, so the numbers of one rank are unique and, for batches,
follow the order the loader hands batches out.
"""

from __future__ import annotations


class HookIndex:
    __slots__ = ("batch", "sample", "worker", "workers")

    def __init__(self) -> None:
        self.batch: int | None = None
        self.sample: int | None = None
        self.worker = 0
        self.workers = 1

    def spread(self, local: int | None, what: str) -> int:
        if local is None:
            from energon_lite.errors import ConfigError

            raise ConfigError(
                f"TaskEncoder.{what} is only set while a loader runs the hooks "
                "(get_loader / get_savable_loader, or iterating the dataset)"
            )
        return local * self.workers + self.worker


# Process-global: Energon's indices are properties read inside any hook (also a plain function
# given to a wrapper), so no call carries them; a worker process runs one chain at a time.
INDEX = HookIndex()
