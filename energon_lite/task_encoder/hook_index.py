"""The indices Energon's ``TaskEncoder.current_batch_index`` / ``current_sample_index`` read.

One per chain, in its :class:`~energon_lite.task_encoder.chain_context.ChainContext` (the
loader sets the worker fields when it builds the chain). The stages that call hooks set the
counters right before each call, from counters they keep in their state, so the values after
a restore continue exactly:

* ``batch``: the worker's count of batches made so far (``Batch`` / ``GroupBatch``; without
  batching, ``Encode``'s count of ``encode_sample`` calls), so ``encode_sample`` sees the
  index of the batch its sample will be in;
* ``sample``: the calling stage's count of calls to its hook (``encode_sample``: per input
  sample, the outputs of a generator hook share it; ``batch`` / ``encode_batch``: per batch).

As in Energon both are per worker, spread over the rank's workers as
``local * num_workers + worker``, so the numbers of one rank are unique and, for batches,
follow the order the loader hands batches out.

Replaying them (``seeds`` 2, the form a fresh run uses; ``Encode``'s state says which): when
``encode_sample`` read an index, ``Encode`` wraps its output's restore key in an
``IndexKey`` with the values read and the global worker, and fetching that key again (a
buffer refilled after a restore, ``loader.restore_sample``) replays them, so the hook sees
the same numbers. ``@stateless(restore_seeds=True)`` then seeds the global generators as
Energon does, from the worker's seed and ``current_sample_index``. A run with ``seeds`` 1 (the
form states saved before the field are given at load, :mod:`energon_lite.state.upgrade`)
continues with the earlier form: keys without indices and seeds derived from the item's
restore key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

SEEDS_LATEST = 2  # IndexKeys + Energon's restore_seeds formula
SEEDS_BY_KEY = 1  # the earlier form: seeds from the restore key, no IndexKeys


class HookIndex:
    __slots__ = (
        "batch",
        "global_worker",
        "read",
        "sample",
        "seed_offset",
        "seeds",
        "worker",
        "workers",
    )

    def __init__(self) -> None:
        self.batch: int | None = None
        self.sample: int | None = None
        self.worker = 0
        self.workers = 1
        self.read = False  # whether a hook read an index since Encode last cleared it
        self.seeds: int | None = None  # the running chain's form; None: no loader runs hooks
        self.global_worker = 0  # the worker whose seed restore_seeds uses
        self.seed_offset = 0

    def spread(self, local: int | None, what: str) -> int:
        if local is None:
            from energon_lite.errors import ConfigError

            raise ConfigError(
                f"TaskEncoder.{what} is only set while a loader runs the hooks "
                "(get_loader / get_savable_loader, or iterating the dataset)"
            )
        self.read = True
        return local * self.workers + self.worker

    def seen(self) -> tuple[int, int]:
        """The spread (batch, sample) a hook sees now; -1 for one that is not set."""
        return tuple(  # type: ignore[return-value]
            -1 if local is None else local * self.workers + self.worker
            for local in (self.batch, self.sample)
        )

    @contextmanager
    def replay(self, global_worker: int, batch: int, sample: int) -> Iterator[None]:
        """The hook sees exactly ``batch`` and ``sample`` (spread values, -1: none) as
        ``global_worker`` did; the fields are put back afterwards."""
        saved = (self.batch, self.sample, self.worker, self.workers, self.global_worker)
        self.batch = None if batch < 0 else batch
        self.sample = None if sample < 0 else sample
        self.worker, self.workers, self.global_worker = 0, 1, global_worker
        try:
            yield
        finally:
            self.batch, self.sample, self.worker, self.workers, self.global_worker = saved

    def energon_seed(self, sample_index: int) -> int:
        """Energon's ``restore_seeds`` seed: from the worker seed (a hash of the global worker
        and the seed offset) and the hook's ``current_sample_index``."""
        worker_seed = _sha1_int(f"{self.global_worker},{self.seed_offset}") & 0xFFFF_FFFF
        return _sha1_int(f"{worker_seed}|{sample_index}", 4)


def _sha1_int(text: str, size: int = 20) -> int:
    return int.from_bytes(hashlib.sha1(text.encode()).digest()[:size], byteorder="big")
