"""Energon's module path ``megatron.energon.flavors.base_dataset``: ``Sample``,
``SavableDataset`` and ``BaseCoreDatasetFactory``. A module, not a dataset kind (kinds are
the packages of ``energon_lite.flavors`` with a ``kind`` module)."""

from __future__ import annotations

from energon_lite.compat.webdataset_factories import BaseCoreDatasetFactory
from energon_lite.loader.savable_dataset import SavableDataset
from energon_lite.samples.types import Sample

__all__ = ["BaseCoreDatasetFactory", "Sample", "SavableDataset"]
