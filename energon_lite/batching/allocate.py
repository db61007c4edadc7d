"""Where a batch's tensors are allocated: :func:`batch_tensor`, used by the collate functions
(``batch_stack``, ``batch_pad_stack``) and by the slabs images decode into.

A worker's batch is pickled to the trainer process through shared memory. Allocating it
there from the start (as torch's own collate does) saves copying every batch once more;
reusing a segment the trainer has let go of saves faulting in fresh pages
(:mod:`energon_lite.batching.memory`, whose pool a worker registers here with
:func:`use_pool`). This module imports none of that machinery, so code that only collates
(or an offline ``prepare``) does not load it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import torch


class SegmentPool(Protocol):
    """What ``batch_tensor`` needs of a worker's batch memory pool."""

    def empty(self, like: torch.Tensor, shape: Sequence[int]) -> torch.Tensor | None:
        """An uninitialised tensor of ``like``'s dtype over a free segment, or None."""

    def hold_back(self, tensor: torch.Tensor) -> None:
        """Send ``tensor``'s segment with no batch until :meth:`let_travel` is called."""

    def let_travel(self, tensor: torch.Tensor) -> None:
        """Send ``tensor``'s segment with the next batch made."""


# Process-global: the collate functions keep Energon's signatures (a user's batch function
# calls them), so there is no place to hand them the pool; a worker process runs one stream.
_POOL: SegmentPool | None = None


def use_pool(pool: SegmentPool | None) -> None:
    """Make ``pool`` the calling worker process's batch memory (None: plain allocation)."""
    global _POOL
    _POOL = pool


def active_pool() -> SegmentPool | None:
    """The pool :func:`use_pool` registered in this process, or None."""
    return _POOL


def batch_tensor(first: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """An uninitialised tensor for a batch, of ``first``'s dtype and device; in a loader
    worker, in shared memory (a pool segment the trainer has let go of, when there is one)."""
    pooled = None if _POOL is None else _POOL.empty(first, shape)
    if pooled is not None:
        return pooled
    if first.device.type == "cpu" and torch.utils.data.get_worker_info() is not None:
        try:
            storage = first._typed_storage()._new_shared(math.prod(shape), device=first.device)
            return first.new(storage).resize_(*shape)
        except (AttributeError, RuntimeError):  # private API moved: fall back to plain memory
            pass
    return torch.empty(tuple(shape), dtype=first.dtype, device=first.device)
