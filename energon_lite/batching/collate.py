"""Collate helpers: pad-and-stack tensors, list everything else (Energon's batching rules)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from energon_lite.batching.allocate import batch_tensor
from energon_lite.batching.slab import claim
from energon_lite.batching.sources import BatchSources
from energon_lite.state.restore_key import batch_restore_keys

KEY_FIELDS = ("__key__", "__restore_key__", "__subflavors__")


def merged_sources(column: Sequence[Any]) -> tuple[Any, ...] | None:
    """A batch's ``__sources__``: every sample's entries, in order (None when there are none),
    in a tuple that travels to the trainer as columns (:class:`BatchSources`)."""
    merged = BatchSources(info for entry in column for info in (entry or ()))
    return merged or None


def batch_stack(batch: Sequence[torch.Tensor]) -> torch.Tensor:
    """Stack tensors of one shape (images decoded into their batch's slab, see
    ``energon_lite/batching/slab.py``, are that slab already: nothing is copied)."""
    batch = list(batch)
    slab = claim(batch)
    if slab is not None:
        return slab
    return torch.stack(batch, out=batch_tensor(batch[0], (len(batch), *batch[0].shape)))


def batch_pad_stack(batch: Sequence[torch.Tensor], pad_value: float = 0) -> torch.Tensor:
    """Stack tensors, padding each dimension with ``pad_value`` to the largest size in the batch."""
    first = batch[0]
    if all(v.shape == first.shape for v in batch):
        return batch_stack(batch)
    if any(v.dim() != first.dim() for v in batch):
        raise ValueError(f"cannot pad-stack tensors of ranks {sorted({v.dim() for v in batch})}")
    shape = [max(v.shape[d] for v in batch) for d in range(first.dim())]
    out = batch_tensor(first, (len(batch), *shape)).fill_(pad_value)
    for i, value in enumerate(batch):
        out[i][tuple(slice(0, s) for s in value.shape)] = value
    return out


def batch_list(batch: Sequence[Any]) -> list[Any]:
    return list(batch)


def generic_batch(batch: Sequence[Any]) -> Any:
    """Batch the samples ``batch`` (or one field across a batch) by Energon's structure-recursing rule:
    tensors pad-stacked, dicts, dataclasses and named tuples batched field by field (a
    dataclass with ``from_samples`` builds itself), anything else (numbers, strings, NumPy
    arrays, None) listed as it is. Where Energon would fail (a column mixing tensors with
    other values or structures of several types), the column is listed; a dict keeps the
    keys every sample has."""
    values = list(batch)
    first = values[0]
    if isinstance(first, torch.Tensor) and all(isinstance(v, torch.Tensor) for v in values):
        return batch_pad_stack(values)
    if isinstance(first, dict) and all(isinstance(v, dict) for v in values):
        return {
            k: generic_batch([v[k] for v in values]) for k in first if all(k in v for v in values)
        }
    if all(type(v) is type(first) for v in values):
        if dataclasses.is_dataclass(first) and not isinstance(first, type):
            if hasattr(first, "from_samples"):
                return first.from_samples(values)
            names = [f.name for f in dataclasses.fields(first)]
            return type(first)(**{n: generic_batch([getattr(v, n) for v in values]) for n in names})
        if isinstance(first, tuple) and hasattr(first, "_fields"):  # a NamedTuple
            return type(first)(*(generic_batch(list(column)) for column in zip(*values)))
    return batch_list(values)


collate_values = generic_batch  # the name the data model's Batch.from_samples used


def default_collate(samples: Sequence[Any], result_type: type | None = None) -> Any:
    """Collate samples field by field into ``result_type`` (default: the samples' own type).

    Dataclass samples give an instance of the same dataclass whose fields hold batched
    values (``__key__`` a list of keys); dicts give a dict; tensors are pad-stacked.
    """
    first = samples[0]
    if dataclasses.is_dataclass(first):
        cls = result_type or type(first)
        names = [f.name for f in dataclasses.fields(cls)]
        values: dict[str, Any] = {}
        for name in names:
            column = [getattr(s, name, None) for s in samples]
            if name == "__sources__":
                values[name] = merged_sources(column)
            elif name == "__restore_key__":
                values[name] = batch_restore_keys(column)
            else:
                values[name] = list(column) if name in KEY_FIELDS else generic_batch(column)
        return cls(**values)
    if isinstance(first, dict):
        batch = {
            k: merged_sources(v)
            if k == "__sources__"
            else batch_restore_keys(v)
            if k == "__restore_key__"
            else list(v)
            if k in KEY_FIELDS
            else generic_batch(v)
            for k, v in ((k, [s[k] for s in samples]) for k in first)
        }
        return result_type(**batch) if result_type is not None else batch
    return generic_batch(samples)
