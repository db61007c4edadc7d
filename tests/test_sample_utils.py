"""``energon_lite.sample_utils``: a sample rendered for debugging, as Energon's
``megatron.energon.sample_utils`` renders it (the oracle, on the same samples)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from energon_lite import TextSample
from energon_lite.sample_utils import (
    default_get_batch_keys,
    format_sample_compact,
    format_sample_detailed,
)


@dataclass
class Inner:
    n: int
    nested: dict[str, int]


@dataclass
class Outer:
    child: Inner
    children: list[Inner]


class Opaque:
    def __repr__(self) -> str:
        return "<opaque " + "x" * 300 + ">"


SAMPLES = [
    {
        "scalars": {"i": -3, "f": 2.5, "b": False, "n": None},
        "multiline": "line1\nline2",
        "seq": (1, 2, "x"),
        "tensor": torch.arange(10, dtype=torch.float32),
        "small": torch.tensor([1, 2]),
        "empty": torch.zeros(0),
        "array": np.arange(4, dtype=np.int64),
        "strings": np.array(["a", "b"]),
        "dc": Outer(child=Inner(1, {"a": 2}), children=[Inner(3, {})] * 12),
        (1, 2): "tuple key",
        "opaque": Opaque(),
        "long": "y" * 1200,
    },
    {f"k{i}": i for i in range(30)},
    "a lone string",
    TextSample(__key__="s0", __restore_key__=("x", 1), text="hello"),
]


@pytest.mark.parametrize("sample", SAMPLES, ids=range(len(SAMPLES)))
def test_formats_as_energon_does(sample: object) -> None:
    energon = pytest.importorskip("megatron.energon.sample_utils")
    for indent in ("", "  "):
        assert format_sample_detailed(sample, indent) == energon.format_sample_detailed(
            sample, indent
        )
    assert format_sample_compact(sample) == energon.format_sample_compact(sample)
    assert format_sample_compact(sample, depth=1, max_items=2, max_str_len=5) == (
        energon.format_sample_compact(sample, depth=1, max_items=2, max_str_len=5)
    )


def test_detailed_view_summarises_tensors() -> None:
    text = format_sample_detailed({"t": torch.arange(10), "label": 5})
    assert text == (
        "t: Tensor(shape=torch.Size([10]), dtype=torch.int64, device=cpu, min=0, max=9, "
        "values=[0, 1, 2, ..., 7, 8, 9])\nlabel: 5"
    )


def test_batch_keys() -> None:
    assert default_get_batch_keys({"__key__": ["a", "b"]}) == ["a", "b"]
    assert default_get_batch_keys([{"keys": ["k"]}]) == ["k"]
    assert default_get_batch_keys({"other": 1}) is None
    sample = TextSample(__key__="s0", __restore_key__=(), text="t")
    assert default_get_batch_keys(sample) is None  # a single key is no batch's keys
