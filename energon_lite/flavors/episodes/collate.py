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
frames in each worker's heap). In the resumable loader's workers that memory is a segment
the trainer has let go of where there is one (:mod:`energon_lite.batching.memory`): a fresh
84 MB segment per batch cost its page faults every time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from energon_lite.batching.allocate import batch_tensor


def _collate(values: list[Any], to_float: bool = False, path: str = "") -> Any:
    first = values[0]
    if isinstance(first, dict):
        return {
            k: _collate([v[k] for v in values], to_float, f"{path}.{k}" if path else k)
            for k in first
        }
    if first is None:
        return None
    if isinstance(first, np.ndarray):
        return _stack(values, to_float and path == "observations.images")
    if isinstance(first, bool):
        return torch.tensor(values, dtype=torch.bool)
    if isinstance(first, float):
        return torch.tensor(values, dtype=torch.float32)
    return list(values)


def _stack(values: list[np.ndarray], to_float: bool = False) -> torch.Tensor:
    """``np.stack(values)`` as a tensor; in a DataLoader worker, into shared memory.

    ``to_float``: float32, uint8 values divided by 255 on the way (the same float32
    division as ``TransitionBuilder``'s ``normalize_images``; float values are copied).
    """
    first = values[0]
    in_worker = torch.utils.data.get_worker_info() is not None
    if not to_float and (not in_worker or first.dtype.hasobject):
        return torch.from_numpy(np.stack(values))
    dtype = np.dtype(np.float32) if to_float else first.dtype
    like = torch.from_numpy(np.empty(0, dtype))
    # in a worker: a shared-memory segment the trainer has let go of, else a fresh one
    out = batch_tensor(like, (len(values), *first.shape))
    array = out.numpy()
    if not to_float:
        np.stack(values, out=array)
        return out
    for i, value in enumerate(values):
        if value.dtype == np.uint8:
            np.divide(value, np.float32(255.0), out=array[i], dtype=np.float32)
        else:
            array[i] = value
    return out


def collate_transitions(
    transitions: list[dict[str, Any]], normalize_images: bool = False
) -> dict[str, Any]:
    """Batch a list of transitions (see the module docstring).

    ``normalize_images=True``: ``observations.images`` becomes float32 in [0, 1], uint8
    frames divided by 255 while they are stacked (frames already float32 are kept).
    """
    if not transitions:
        raise ValueError("collate_transitions needs at least one transition")
    return _collate(transitions, normalize_images)
