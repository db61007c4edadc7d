"""Energon's metadataset API names over energon_lite's loader: ``load_dataset``,
``DatasetLoader``, ``Metadataset``, ``MetadatasetV2``, ``traverse_metadataset``,
``prepare_metadataset``, ``get_val_datasets``.

A loader object answers ``get_datasets(training=, split_part=, worker_config=)`` with the
flat list of leaf datasets, their blend weights or repetitions and the blend mode, and
``traverse(split_part=)`` with the leaf references. The leaves are what
``get_train_dataset`` / ``get_val_dataset`` read; these objects are for inspecting a
(meta)dataset and for validating each dataset of a blend on its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from energon_lite.compat.arguments import get_val_dataset
from energon_lite.epathlib import EPath
from energon_lite.errors import ConfigError, DatasetFormatError
from energon_lite.loader.api import SavableDataset
from energon_lite.metadataset.loader_interface import DatasetBlendMode
from energon_lite.metadataset.metadataset_v2 import SplitConfig, parse_splits
from energon_lite.metadataset.parse import load_metadataset
from energon_lite.metadataset.v1 import is_v1
from energon_lite.shards.meta import load_yaml
from energon_lite.sources.kinds import open_source
from energon_lite.sources.leaf import Leaf
from energon_lite.storage import StoragePath

_MODES = {"weights": "DATASET_WEIGHT", "epochized": "SAMPLE_REPETITIONS", "single": "NONE"}


@dataclass
class TraversedDatasetReference:
    """One leaf of a split: its folder, split, auxiliary sources and the subflavors the
    metadataset gives it."""

    path: EPath
    split_part: str
    aux: dict[str, EPath] = field(default_factory=dict)
    subflavors: dict[str, Any] | None = None


@dataclass
class LeafDataset:
    """A leaf dataset as ``get_datasets`` describes it: ``paths``, the effective
    ``subflavors`` (dataset.yaml's, overridden by the metadataset's) and the ``leaf``."""

    leaf: Leaf
    subflavors: dict[str, Any] | None

    @property
    def paths(self) -> list[StoragePath]:
        return [self.leaf.path]

    @property
    def split_part(self) -> str:
        return self.leaf.split_part

    def __len__(self) -> int:
        return len(open_source(self.leaf))


@dataclass
class LoadedDataset:
    dataset: LeafDataset
    weight: float | Callable[[int], float] | None = None  # a callable: a weight schedule
    repetitions: float | None = None
    aux: dict[str, Any] | None = None


@dataclass
class LoadedDatasetList:
    datasets: list[LoadedDataset]
    blend_mode: DatasetBlendMode = DatasetBlendMode.NONE


class DatasetLoaderInterface:
    """A dataset folder or a metadataset file, as Energon's loaders."""

    path: Path

    def _leaves(self, split_part: str) -> tuple[list[Leaf], str]:
        raise NotImplementedError

    def post_initialize(self, mds_path: Any = None) -> None:
        """Energon's second init step: nothing to do (the file is read when asked)."""

    def prepare(self, split_part: str | None = None) -> None:
        """Check that every split (or ``split_part``) resolves to readable, non-empty leaves,
        and make the match index of each ``join:`` (as Energon's prepare does); after all
        splits, index and spec files no join uses any more are deleted."""
        from energon_lite.metadataset.join import preparing_joins, remove_stale_join_files

        with preparing_joins() as used:
            for name in [split_part] if split_part else self.split_names():
                self._leaves(name)
        if split_part is None:
            try:
                own = Path(os.fspath(self.path))
            except TypeError:  # a remote metadataset: it has no joins
                return
            own = own.with_name(own.name + ".cache")
            remove_stale_join_files(used, [own] if own.is_dir() else [])

    def split_names(self) -> list[str]:
        raise NotImplementedError

    def get_datasets(
        self,
        *,
        training: bool,
        split_part: str,
        worker_config: Any = None,
        subflavors: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> LoadedDatasetList:
        """The leaves of ``split_part`` with their weights / repetitions and the blend mode."""
        leaves, mode = self._leaves(split_part)
        out = []
        for leaf in leaves:
            config = open_source(leaf).config
            merged = {**(config.get("subflavors") or {}), **(leaf.subflavors or {})}
            if subflavors:
                merged.update(subflavors)
            out.append(
                LoadedDataset(LeafDataset(leaf, merged or None), leaf.weight, leaf.repetitions)
            )
        return LoadedDatasetList(out, DatasetBlendMode[_MODES[mode]])

    def traverse(self, split_part: str, **_kwargs: Any) -> list[TraversedDatasetReference]:
        """The leaf references of ``split_part`` (metadataset subflavors only)."""
        leaves, _ = self._leaves(split_part)
        return [_reference(leaf) for leaf in leaves]


class DatasetLoader(DatasetLoaderInterface):
    """One prepared dataset folder."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        split_part: str | None = None,
        subflavors: dict[str, Any] | None = None,
        shuffle_over_epochs_multiplier: int | None = 1,
        dataset_config: str | None = None,
        split_config: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.split_part = split_part
        self.subflavors = subflavors
        self.multiplier = shuffle_over_epochs_multiplier
        self.dataset_config = dataset_config or "dataset.yaml"
        self.split_config = split_config or "split.yaml"

    def split_names(self) -> list[str]:
        from energon_lite.shards.metadata import dataset_metadata

        return list(dataset_metadata(self.path).split(self.split_config).split_parts)

    def _leaves(self, split_part: str) -> tuple[list[Leaf], str]:
        leaf = Leaf(
            self.path,
            self.split_part or split_part,
            subflavors=self.subflavors,
            shuffle_over_epochs_multiplier=self.multiplier,
            split_config=self.split_config,
            dataset_config=self.dataset_config,
        )
        open_source(leaf)  # the split exists
        return [leaf], "single"


class MetadatasetV2(DatasetLoaderInterface):
    """A metadataset YAML file (``__class__: MetadatasetV2``; v1 files are read too).

    ``splits`` maps each split to Energon's config object for it
    (``energon_lite/metadataset/metadataset_v2.py``): ``splits["train"].blend[0].path``."""

    def __init__(self, path: str | os.PathLike[str], **_kwargs: Any) -> None:
        self.path = Path(path)
        self._splits: dict[str, SplitConfig] | None = None

    @property
    def splits(self) -> dict[str, SplitConfig]:
        if self._splits is None:
            self._splits = parse_splits(load_yaml(self.path), EPath(self.path))
        return self._splits

    def split_names(self) -> list[str]:
        data = load_yaml(self.path)
        splits = data.get("splits") if isinstance(data, dict) else None
        if not isinstance(splits, dict):
            raise DatasetFormatError(f"{self.path}: needs a mapping 'splits'")
        return [str(name) for name in splits]

    def _leaves(self, split_part: str) -> tuple[list[Leaf], str]:
        return load_metadataset(self.path, split_part)

    def traverse(self, split_part: str, **_kwargs: Any) -> list[TraversedDatasetReference]:
        """The datasets ``split_part`` refers to, nested files flattened, as written: a leaf
        folder need not exist or be prepared yet (e.g. to fetch the datasets before training);
        ``aux`` maps each auxiliary source's name to its path."""
        leaves, _ = load_metadataset(self.path, split_part, open_leaves=False)
        return [_reference(leaf) for leaf in leaves]


def _reference(leaf: Leaf) -> TraversedDatasetReference:
    aux = {
        name: EPath(spec.removeprefix("filesystem://")) for name, spec in (leaf.aux or {}).items()
    }
    return TraversedDatasetReference(
        EPath(leaf.path), leaf.split_part, aux, dict(leaf.subflavors or {})
    )


class Metadataset(MetadatasetV2):
    """A v1 metadataset file (``__class__: Metadataset``, ``splits: X: datasets: [...]``)."""


def load_dataset(path: str | os.PathLike[str], **kwargs: Any) -> DatasetLoaderInterface:
    """A loader for a dataset folder (``DatasetLoader``) or a metadataset file."""
    path = Path(path)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return Metadataset(path) if is_v1(load_yaml(path)) else MetadatasetV2(path)
    if not path.exists():
        raise ConfigError(f"dataset path {path} does not exist")
    return DatasetLoader(path, **kwargs)


def traverse_metadataset(
    path: str | os.PathLike[str], *, split_part: str, **_kwargs: Any
) -> list[TraversedDatasetReference]:
    """The leaf references of one split of a metadataset file, nested files flattened."""
    loader = load_dataset(path)
    if not isinstance(loader, MetadatasetV2):
        raise ConfigError(f"{path} is not a metadataset file")
    return loader.traverse(split_part)


def prepare_metadataset(path: str | os.PathLike[str]) -> None:
    """Prepare a metadataset: every split resolves to readable, non-empty leaves, and each
    ``join:`` gets its match index (needed before a joined dataset can be loaded; run it
    again after editing a join)."""
    load_dataset(path).prepare()


def get_val_datasets(
    path: str | os.PathLike[str],
    *,
    split_part: str = "val",
    worker_config: Any,
    batch_size: int | None,
    **kwargs: Any,
) -> list[tuple[SavableDataset, LeafDataset]]:
    """One validation dataset per leaf of ``split_part`` (to report each source on its own),
    each with the leaf it reads. ``kwargs`` go to ``get_val_dataset``."""
    loaded = load_dataset(path).get_datasets(
        training=False, split_part=split_part, worker_config=worker_config
    )
    out = []
    for entry in loaded.datasets:
        leaf = entry.dataset.leaf
        if leaf.subset is not None:
            raise ConfigError(
                f"{path}: get_val_datasets does not take a subset ({leaf.path} uses "
                f"{leaf.subset}); validate the whole split or use get_val_dataset on the file"
            )
        dataset = get_val_dataset(
            leaf.path,
            worker_config=worker_config,
            batch_size=batch_size,
            split_part=leaf.split_part,
            subflavors=leaf.subflavors,
            split_config=leaf.split_config,
            dataset_config=leaf.dataset_config,
            **kwargs,
        )
        out.append((dataset, entry.dataset))
    return out
