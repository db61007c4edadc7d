"""Collate transitions into a batch: dicts of tensors with a leading batch dimension.

Arrays are stacked into one tensor per field (``actions`` (B, chunk_size, A),
``observations.qpos`` (B, D), ``observations.images`` (B, n_cam, H, W, 3)); ``is_positive``
becomes a bool tensor and ``final_reward`` a float32 tensor of shape (B,); a field that is
None in every transition (``depth_images`` without depth) stays None; ``__key__`` and
``__restore_key__`` become lists.

In a DataLoader worker an array field is stacked straight into shared memory (as torch's
``default_collate`` does): the batch crosses to the main process without a second copy,
and the worker's heap never holds a batch-sized array (stacking into the heap made
``Tensor`` pickling copy every batch again, into shared memory, and left a batch of
frames in each worker's heap).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def _collate(values: list[Any]) -> Any:
    first = values[0]
    if isinstance(first, dict):
        return {k: _collate([v[k] for v in values]) for k in first}
    if first is None:
        return None
    if isinstance(first, np.ndarray):
        return _stack(values)
    if isinstance(first, bool):
        return torch.tensor(values, dtype=torch.bool)
    if isinstance(first, float):
        return torch.tensor(values, dtype=torch.float32)
    return list(values)


def _stack(values: list[np.ndarray]) -> torch.Tensor:
    """``np.stack(values)`` as a tensor; in a DataLoader worker, into shared memory."""
    first = values[0]
    if torch.utils.data.get_worker_info() is None or first.dtype.hasobject:
        return torch.from_numpy(np.stack(values))
    shape = (len(values), *first.shape)
    dtype = torch.from_numpy(np.empty(0, first.dtype)).dtype
    storage = torch.UntypedStorage._new_shared(int(np.prod(shape)) * first.itemsize)
    out = torch.empty(0, dtype=dtype).set_(storage).view(shape)
    np.stack(values, out=out.numpy())
    return out


def collate_transitions(transitions: list[dict[str, Any]]) -> dict[str, Any]:
    """Batch a list of transitions (see the module docstring)."""
    if not transitions:
        raise ValueError("collate_transitions needs at least one transition")
    return _collate(transitions)
