"""Collate transitions into a batch: dicts of tensors with a leading batch dimension.

Arrays are stacked into one tensor per field (``actions`` (B, chunk_size, A),
``observations.qpos`` (B, D), ``observations.images`` (B, n_cam, H, W, 3)); ``is_positive``
becomes a bool tensor and ``final_reward`` a float32 tensor of shape (B,); a field that is
None in every transition (``depth_images`` without depth) stays None; ``__key__`` and
``__restore_key__`` become lists.
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
        return torch.from_numpy(np.stack(values))
    if isinstance(first, bool):
        return torch.tensor(values, dtype=torch.bool)
    if isinstance(first, float):
        return torch.tensor(values, dtype=torch.float32)
    return list(values)


def collate_transitions(transitions: list[dict[str, Any]]) -> dict[str, Any]:
    """Batch a list of transitions (see the module docstring)."""
    if not transitions:
        raise ValueError("collate_transitions needs at least one transition")
    return _collate(transitions)
