"""``SavableDataset``: a pipeline plus the worker configuration, run inside each worker.

Every worker builds its own chain from the pipeline and yields
``(logical worker, batch, state after this batch)``; iterating the dataset directly yields
the batches alone (``get_train_dataset(...)`` used as a plain torch ``IterableDataset``).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

from torch.utils.data import IterableDataset, get_worker_info

from energon_lite.errors import ConfigError
from energon_lite.pipeline import Pipeline
from energon_lite.worker import WorkerConfig


class SavableDataset(IterableDataset):
    """A pipeline plus the worker configuration; iterating it yields batches (no state)."""

    def __init__(self, pipeline: Pipeline, worker_config: WorkerConfig) -> None:
        super().__init__()
        self.pipeline = pipeline
        self.worker_config = worker_config

    def __iter__(self) -> Iterator[Any]:
        for _, batch, _ in self.iter_with_state(None, 0, 0, save_states=False):
            yield batch

    def iter_with_state(
        self, states: list[Any] | None, rotation: int, epoch: int, save_states: bool = True
    ) -> Iterator[tuple[int, Any, Any]]:
        """Run the chain of the calling worker; yield ``(logical worker, batch, state)``."""
        info = get_worker_info()
        physical = info.id if info is not None else 0
        n = self.worker_config.workers_per_rank
        logical = (physical + rotation) % n
        chain = self.pipeline.build(self.worker_config.slot(logical, epoch))
        chain.restore_state(states[logical] if states is not None else None)
        check_pickle = info is not None
        while True:
            try:
                batch = chain.next()
            except StopIteration:
                return
            if check_pickle:  # once per worker: an unpicklable batch would hang torch's queue
                _check_picklable(batch, logical)
                check_pickle = False
            yield logical, batch, chain.save_state() if save_states else None

    def __len__(self) -> int:
        return self.pipeline.batches_per_epoch(self.worker_config)

    def config(self) -> dict[str, Any]:
        """Everything a saved state must match."""
        wc = self.worker_config
        return {
            "rank": wc.rank,
            "world_size": wc.world_size,
            "num_workers": wc.num_workers,
            "seed": wc.seed_offset,
            **self.pipeline.fingerprint(),
        }


def _check_picklable(batch: Any, worker: int) -> None:
    try:
        pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise ConfigError(
            f"worker {worker}: a batch of type {type(batch).__module__}.{type(batch).__qualname__} "
            f"cannot be pickled to send it to the trainer process ({type(exc).__name__}: {exc}); "
            "define sample and batch classes at module level in an importable module"
        ) from exc
