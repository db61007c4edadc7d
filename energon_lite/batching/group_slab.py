"""Per-group batch slabs: a sample's tensor made straight into its row of its group's batch.

A bucketing task encoder knows, when it encodes a sample, the sample's bucket and that
bucket's batch size, and ``GroupBatch`` emits each bucket's samples in the order they came.
So instead of making each sample's tensor on its own and copying it into the batch later
(for a 640x360 video-text bucket that copy is 177 MB per batch), the encoder asks
:meth:`GroupSlabs.row` for the next row of its bucket's slab (a batch-sized tensor, made like
a stacked batch: from the worker's shared-memory pool in a loader worker) and writes the
sample there; ``batch`` asks :meth:`GroupSlabs.claim`, which returns the slab itself (or its
first ``n`` rows) when the values to stack are exactly its rows ``0 .. n-1``, in order, with
no other row handed out. Anything else (a skipped or failed sample, a user hook that made new
tensors, a batch of another order) is stacked as before, by copying: the values are the
same either way.

Unlike ``batching/slab.py`` (one scope around one ``Batch`` stage's pull), a bucket's slab
stays open across batches of other buckets while it fills; a full slab waits (at most
:data:`MAX_WAITING` per group) until its batch claims it. A slab's pool segment travels with
the batch made in it (``BatchMemoryPool.collect``), not with whichever batch went out while
it filled. Slabs are per process: a copy of the task encoder pickled or forked into a worker
starts with none.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Sequence
from typing import Any

import torch

from energon_lite.batching.allocate import active_pool, batch_tensor

MAX_WAITING = 8  # full slabs kept per group for their batch; older ones go to the copy path


class _Slab:
    __slots__ = ("handed", "tensor")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor
        self.handed = 0


class GroupSlabs:
    """The open and the full, unclaimed slabs of each group (a bucket), in order."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._slabs: dict[Hashable, list[_Slab]] = {}  # oldest first; only the last may be open

    def __getstate__(self) -> dict[str, Any]:
        return {}  # tensors stay in the process that made them

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]

    def row(
        self, group: Hashable, rows: int, dtype: torch.dtype, shape: Sequence[int]
    ) -> torch.Tensor:
        """An uninitialised tensor of ``shape``: the next row of ``group``'s open slab of
        ``rows`` rows (a new slab when there is none, or it is full or of another kind)."""
        if self._pid != os.getpid():  # a forked copy: the parent's slabs are not ours
            self.__init__()  # type: ignore[misc]
        slabs = self._slabs.setdefault(group, [])
        shape = tuple(shape)
        last = slabs[-1] if slabs else None
        if (
            last is None
            or last.handed >= last.tensor.shape[0]
            or last.tensor.shape != (rows, *shape)
            or last.tensor.dtype != dtype
        ):
            last = _Slab(batch_tensor(torch.empty(0, dtype=dtype), (rows, *shape)))
            pool = active_pool()
            if pool is not None:  # its segment goes out with its own batch, not the next one
                pool.hold_back(last.tensor)
            slabs.append(last)
            full = [s for s in slabs if s.handed >= s.tensor.shape[0]]
            if len(full) > MAX_WAITING:  # their batches never claimed them: let them go
                _let_go([full[0]])
                slabs.remove(full[0])
        out = last.tensor[last.handed]
        last.handed += 1
        return out

    def give_back(self, group: Hashable, row: torch.Tensor) -> None:
        """Undo :meth:`row` for ``row`` (its sample failed before it was used), if it is the
        last row handed out in ``group``; else nothing (the batch then copies)."""
        slabs = self._slabs.get(group)
        if slabs and slabs[-1].handed > 0:
            slab = slabs[-1]
            if _is_row(slab.tensor, slab.handed - 1, row):
                slab.handed -= 1

    def claim(self, group: Hashable, values: Sequence[Any]) -> torch.Tensor | None:
        """``group``'s slab (its first ``len(values)`` rows) when ``values`` are exactly its
        handed-out rows in order; else None. Slabs of the group older than the one claimed,
        or all of its full ones when none matches, are let go (their batches were made
        otherwise)."""
        slabs = self._slabs.get(group)
        if not slabs or not values:
            return None
        for index, slab in enumerate(slabs):
            if slab.handed == len(values) and all(
                _is_row(slab.tensor, i, value) for i, value in enumerate(values)
            ):
                _let_go(slabs[: index + 1])
                del slabs[: index + 1]
                tensor = slab.tensor
                return tensor if len(values) == tensor.shape[0] else tensor[: len(values)]
        full = [s for s in slabs if s.handed >= s.tensor.shape[0]]
        _let_go(full)
        slabs[:] = [s for s in slabs if s.handed < s.tensor.shape[0]]
        return None


def _let_go(slabs: Sequence[_Slab]) -> None:
    """The slabs' pool segments go out with the next batch (claimed: in it; else as a slab
    of ``batching/slab.py`` that no batch claimed: the trainer frees it with that batch)."""
    pool = active_pool()
    if pool is not None:
        for slab in slabs:
            pool.let_travel(slab.tensor)


def _is_row(tensor: torch.Tensor, index: int, value: Any) -> bool:
    """Whether ``value`` is ``tensor[index]`` itself: same memory, dtype, shape and strides."""
    return (
        type(value) is torch.Tensor
        and value.data_ptr() == tensor.data_ptr() + index * tensor.stride(0) * tensor.element_size()
        and value.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()
        and value.dtype == tensor.dtype
        and value.shape == tensor.shape[1:]
        and value.stride() == tensor.stride()[1:]
        and not value.requires_grad
    )
