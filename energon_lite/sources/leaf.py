"""``Leaf``: one dataset of a (meta)dataset and how it takes part in the blend.

The metadataset loader (and ``get_train_dataset`` for a single folder) describes what to
read as a list of leaves; the pipeline opens each leaf through the dataset-kind registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from energon_lite.storage import StoragePath


@dataclass
class Leaf:
    """One dataset of a (meta)dataset, with how it takes part in the blend."""

    path: StoragePath  # a local folder or a RemotePath (s3://, msc://, http(s)://)
    split_part: str
    # blend: a number, or a callable weight_at(step) (a schedule: metadataset/schedule.py)
    weight: float | Callable[[int], float] | None = None
    repetitions: float | None = None  # blend_epochized
    subflavors: dict[str, Any] | None = None
    subset: tuple[int | str, int | str] | None = None  # ints, "N%" or "end"
    shuffle_over_epochs_multiplier: int | None = 1
    split_config: str = "split.yaml"
    dataset_config: str = "dataset.yaml"
    aux: dict[str, str] | None = None  # name -> aux source (crude leaves; cookers read it)
    composition: str | None = None  # batch_composition of the blend: random (None), ...
    weight_unit: str | None = None  # weight_unit of the blend: samples (None) or tokens
    # the weight the YAML gave this leaf's own entry (``weight`` is its share of the whole
    # blend): what ``info`` shows beside the share; nothing reads it to build the stream
    given_weight: float | None = None
