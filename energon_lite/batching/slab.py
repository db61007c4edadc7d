"""Decoding images straight into their batch, so that stacking them copies nothing.

While the ``Batch`` stage pulls one batch's samples and collates them, it opens a scope
(:class:`SlabScope`). An image decoder asks :func:`slot` for its output tensor; inside a
scope that is row ``k`` of a batch-sized tensor (the slab: allocated like a stacked batch,
from the worker's shared-memory pool in a loader worker), ``k`` counting the slots handed
out. :func:`claim` (called by ``batch_stack``) returns the slab itself, or its first ``n``
rows, when the tensors to stack are exactly its slots ``0 .. n-1`` in order, with no other
slot handed out; anything else (a user transform that made new tensors, a skipped or
filtered sample, packing, a custom batch) is stacked as before. The user gets the same
values, dtype, shape and strides as from ``torch.stack``.

A slab is made for one batch and never reused (the batch handed to the trainer is the slab).
When a scope's slab is not claimed, the next ``1, 2, 4 .. 64`` batches decode into tensors
of their own (so a pipeline whose batches never claim their slab allocates one extra slab
every 64 batches at most); a claimed slab resets that back-off. Scopes nest (an inner
batcher's samples go to its own slab) and are per thread.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import torch

from energon_lite.batching.allocate import batch_tensor

MAX_BACKOFF = 64


class _Slab:
    __slots__ = ("claimed", "handed", "rows", "tensor")

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.tensor: torch.Tensor | None = None
        self.handed = 0
        self.claimed = False


class _Local(threading.local):
    def __init__(self) -> None:
        self.stack: list[_Slab | None] = []


# Per thread, not passed down: images are decoded inside the user's hooks (decoder, cookers,
# encode_sample), and those have no place to receive the Batch stage's open scope.
_LOCAL = _Local()


class SlabScope:
    """One batcher's scope; ``with scope:`` around pulling and collating one batch."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.skip = 0  # batches left to make without a slab
        self.backoff = 1
        self.slab: _Slab | None = None

    def __enter__(self) -> SlabScope:
        if self.skip > 0:
            self.skip -= 1
            self.slab = None
        else:
            self.slab = _Slab(self.rows)
        _LOCAL.stack.append(self.slab)
        return self

    def __exit__(self, *exc: Any) -> None:
        _LOCAL.stack.pop()
        slab, self.slab = self.slab, None
        if slab is None or slab.tensor is None:
            return
        if slab.claimed:
            self.backoff = 1
        else:
            self.skip, self.backoff = self.backoff, min(2 * self.backoff, MAX_BACKOFF)


def slot(dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor | None:
    """An uninitialised tensor for the next sample's image: a row of the open scope's slab,
    or None (no scope, backing off, or a dtype/shape other than the slab's, or it is full)."""
    stack = _LOCAL.stack
    slab = stack[-1] if stack else None
    if slab is None:
        return None
    if slab.tensor is None:
        slab.tensor = batch_tensor(torch.empty(0, dtype=dtype), (slab.rows, *shape))
    elif slab.tensor.dtype != dtype or tuple(slab.tensor.shape[1:]) != shape:
        return None
    if slab.handed >= slab.rows:
        return None
    row = slab.tensor[slab.handed]
    slab.handed += 1
    return row


def claim(values: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """The open scope's slab (its first ``len(values)`` rows) when ``values`` are exactly its
    handed-out slots in order; else None."""
    stack = _LOCAL.stack
    slab = stack[-1] if stack else None
    if slab is None or slab.tensor is None or slab.claimed or len(values) != slab.handed:
        return None
    tensor = slab.tensor
    step = tensor.stride(0) * tensor.element_size()
    base = tensor.data_ptr()
    row_shape, row_stride = tensor.shape[1:], tensor.stride()[1:]
    for i, value in enumerate(values):
        if (
            type(value) is not torch.Tensor
            or value.data_ptr() != base + i * step
            or value.dtype != tensor.dtype
            or value.shape != row_shape
            or value.stride() != row_stride
            or value.requires_grad
        ):
            return None
    slab.claimed = True
    return tensor if len(values) == slab.rows else tensor[: len(values)]
