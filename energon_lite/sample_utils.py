"""Readable views of a sample for debugging (Energon's ``megatron.energon.sample_utils``).

``format_sample_detailed`` renders a sample as YAML: tensors and arrays summarised (shape,
dtype, min, max and a few values), dataclasses as ``{ClassName: {field: ...}}``, long
containers and strings cut, anything else by its ``repr``. ``format_sample_compact`` is the
one-line form for log messages; ``default_get_batch_keys`` finds the sample keys of a batch.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np
import torch
import yaml

__all__ = ["default_get_batch_keys", "format_sample_compact", "format_sample_detailed"]

_SHOWN_VALUES = 3  # values shown from each end of a tensor or array
_MAX_DICT_ITEMS = 25
_MAX_LIST_ITEMS = 10
_MAX_STR = 1000
_MAX_REPR = 200


def default_get_batch_keys(batch: Any) -> list[str] | None:
    """The string keys of a batch (or of the first item of a list): ``__key__`` or
    ``__keys__`` as an attribute, then as a dict entry, then a dict's ``"keys"``; None when
    none of them is a list of strings."""
    if isinstance(batch, list):
        batch = batch[0]
    for name in ("__key__", "__keys__"):
        value = getattr(batch, name, None)
        if isinstance(value, list) and all(isinstance(k, str) for k in value):
            return value
    if isinstance(batch, dict):
        for name in ("__key__", "__keys__", "keys"):
            if name in batch and all(isinstance(k, str) for k in batch[name]):
                return batch[name]
    return None


def format_sample_compact(
    sample: Any, depth: int = 3, max_items: int = 10, max_str_len: int = 50
) -> str:
    """One line: containers to ``depth`` levels and ``max_items`` items, strings cut at
    ``max_str_len``, tensors and arrays by shape and dtype. Key fields (``__key__`` ...) of
    a dict are shown whole."""

    def inner(value: Any) -> str:
        return format_sample_compact(value, depth - 1, max_items, max_str_len)

    if isinstance(sample, dict):
        if depth <= 0:
            return "{...}"
        items = itertools.islice(sample.items(), max_items)
        return (
            "{"
            + ", ".join(
                f"{k}: {v!r}" if isinstance(k, str) and k.startswith("__") else f"{k}: {inner(v)}"
                for k, v in items
            )
            + "}"
        )
    if isinstance(sample, (list, tuple)):
        opening, closing = ("[", "]") if isinstance(sample, list) else ("(", ")")
        if depth <= 0:
            return f"{opening}...{closing}"
        return opening + ", ".join(inner(v) for v in sample[:max_items]) + closing
    if isinstance(sample, str):
        return repr(sample[:max_str_len] + "...") if len(sample) > max_str_len else repr(sample)
    if isinstance(sample, torch.Tensor):
        return f"Tensor(shape={sample.shape}, dtype={sample.dtype}, device={sample.device})"
    if isinstance(sample, np.ndarray):
        return f"np.ndarray(shape={sample.shape}, dtype={sample.dtype})"
    if dataclasses.is_dataclass(sample) and not isinstance(sample, type):
        fields = ", ".join(
            f"{f.name}={format_sample_compact(getattr(sample, f.name), depth, max_items, max_str_len)}"
            for f in dataclasses.fields(sample)
        )
        return f"{type(sample).__name__}({fields})"
    return format_sample_compact(repr(sample), depth, max_items, max_str_len)


def _values(flat: Any, item: Any) -> str:
    """``values=[...]``: all of a flat tensor/array, or its first and last few."""
    n = len(flat)
    if n <= 2 * _SHOWN_VALUES:
        return "values=[" + ", ".join(repr(item(v)) for v in flat) + "]"
    head = ", ".join(repr(item(v)) for v in flat[:_SHOWN_VALUES])
    tail = ", ".join(repr(item(v)) for v in flat[n - _SHOWN_VALUES :])
    return f"values=[{head}, ..., {tail}]"


def _tensor(t: torch.Tensor) -> str:
    plain = f"Tensor(shape={t.shape}, dtype={t.dtype}, device={t.device}"
    try:
        shown = _values(t.flatten(), lambda v: v.item())
        return f"{plain}, min={t.min().item()}, max={t.max().item()}, {shown})"
    except (RuntimeError, ValueError):  # empty, or values without an order
        return plain + ")"


def _array(a: np.ndarray) -> str:
    plain = f"np.ndarray(shape={a.shape}, dtype={a.dtype}"
    try:
        return f"{plain}, min={a.min()}, max={a.max()}, {_values(a.ravel(), lambda v: v)})"
    except (ValueError, TypeError):
        return plain + ")"


def _printable(sample: Any) -> Any:
    if isinstance(sample, torch.Tensor):
        return _tensor(sample)
    if isinstance(sample, np.ndarray):
        return _array(sample)
    if dataclasses.is_dataclass(sample) and not isinstance(sample, type):
        return {
            type(sample).__name__: {
                f.name: _printable(getattr(sample, f.name)) for f in dataclasses.fields(sample)
            }
        }
    if isinstance(sample, dict):
        items = list(sample.items())
        out = {
            k if isinstance(k, (str, int, float, bool, type(None))) else repr(k): _printable(v)
            for k, v in items[:_MAX_DICT_ITEMS]
        }
        if len(items) > _MAX_DICT_ITEMS:
            out["..."] = f"and {len(items) - _MAX_DICT_ITEMS} more items"
        return out
    if isinstance(sample, (list, tuple)):
        shown = [_printable(v) for v in sample[:_MAX_LIST_ITEMS]]
        if len(sample) > _MAX_LIST_ITEMS:
            shown.append(f"... and {len(sample) - _MAX_LIST_ITEMS} more items")
        return shown
    if isinstance(sample, str):
        if len(sample) > _MAX_STR:
            return f"{sample[:_MAX_STR]}... (and {len(sample) - _MAX_STR} more characters)"
        return sample
    if isinstance(sample, (int, float, bool, type(None))):
        return sample
    text = repr(sample)
    return text[:_MAX_REPR] + "..." if len(text) > _MAX_REPR else text


def format_sample_detailed(sample: Any, indent: str = "") -> str:
    """Several lines of YAML describing ``sample``; each line prefixed with ``indent``."""
    rendered = yaml.safe_dump(
        _printable(sample), sort_keys=False, default_flow_style=False, width=120
    ).rstrip()
    if rendered.endswith("\n..."):  # the document end marker of a lone scalar
        rendered = rendered[: -len("\n...")]
    if indent:
        return "\n".join(f"{indent}{line}" if line else line for line in rendered.splitlines())
    return rendered
