"""Energon's structure-recursing collate helpers.

``generic_batch`` (defined with the other collate rules in :mod:`energon_lite.batching.collate`,
where the default batching uses it) stacks samples into a batch (tensors padded and stacked
along a new first dimension); ``generic_concat`` joins batches into one (tensors padded and concatenated along
their first dimension); both recurse into dicts, dataclasses and named tuples and list
everything else. ``homogeneous_concat_mix`` is ``generic_concat`` for batches of one type.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from energon_lite.batching.collate import generic_batch

__all__ = ["concat_pad", "generic_batch", "generic_concat", "homogeneous_concat_mix"]


def _recurse(items: Sequence[Any], fn: Callable[[list[Any]], Any]) -> Any | None:
    """``fn`` applied per field of dicts / dataclasses / named tuples; None for other values."""
    first = items[0]
    if isinstance(first, dict):
        return {key: fn([item[key] for item in items]) for key in first}
    if dataclasses.is_dataclass(first) and not isinstance(first, type):
        names = [f.name for f in dataclasses.fields(first)]
        return type(first)(**{n: fn([getattr(item, n) for item in items]) for n in names})
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(**{n: fn([getattr(item, n) for item in items]) for n in first._fields})
    return None


def concat_pad(batch: Sequence[torch.Tensor]) -> torch.Tensor:
    """Concatenate the tensors ``batch`` along dimension 0, zero-padding the other dimensions
    to the largest."""
    first = batch[0]
    rows = sum(t.shape[0] for t in batch)
    shape = [max(t.shape[d] for t in batch) for d in range(1, first.dim())]
    out = first.new_zeros((rows, *shape))
    start = 0
    for t in batch:
        index = [slice(start, start + t.shape[0])]
        index.extend(slice(0, s) for s in t.shape[1:])
        out[tuple(index)] = t
        start += t.shape[0]
    return out


def generic_concat(batch: Sequence[Any]) -> Any:
    """Join the batches ``batch`` into one: tensors with ``concat_pad``, structures per field, anything
    else as the list of the batch' values (as Energon)."""
    batch = list(batch)
    if isinstance(batch[0], torch.Tensor):
        return concat_pad(batch)
    nested = _recurse(batch, generic_concat)
    return nested if nested is not None else batch


def homogeneous_concat_mix(samples: Sequence[Any]) -> Any:
    """``generic_concat`` of samples that all have the same type (a TypeError otherwise)."""
    kinds = {type(b).__name__ for b in samples}
    if len(kinds) > 1:
        raise TypeError(f"homogeneous_concat_mix: samples of several types {sorted(kinds)}")
    return generic_concat(samples)
