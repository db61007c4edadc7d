"""Checks that a batch can travel from a worker process to the trainer.

torch's worker queue pickles each batch in a feeder thread; when that fails, the thread
prints a traceback and drops the batch, and the trainer waits for it forever. So every
batch is test-pickled in the worker first, cheaply: tensors and arrays are skipped (they
always pickle, and their bytes would dominate the cost), so only the Python structure around
them (sample classes, lists of keys, user objects) is walked.
"""

from __future__ import annotations

import io
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import torch

from energon_lite.errors import ConfigError
from energon_lite.samples.types import basic_sample_keys


class _NullSink(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return len(data)


class _StructurePickler(ForkingPickler):
    """The queue's pickler, with tensors and arrays replaced by a constant."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, (torch.Tensor, np.ndarray)):
            return int, (0,)
        return NotImplemented


def check_sendable(batch: Any, worker: int) -> None:
    """Raise a ConfigError naming the batch's keys if torch's queue could not send it."""
    try:
        _StructurePickler(_NullSink(), -1).dump(batch)
    except Exception as exc:
        keys = basic_sample_keys(batch)["__key__"] if not isinstance(batch, (list, tuple)) else None
        raise ConfigError(
            f"worker {worker}: a batch of type {type(batch).__module__}.{type(batch).__qualname__} "
            f"(keys {keys!r}) cannot be pickled to send it to the trainer process "
            f"({type(exc).__name__}: {exc}); define sample and batch classes at module level "
            "in an importable module and keep unpicklable objects (locks, open files, "
            "lambdas, generators) out of batches"
        ) from exc
