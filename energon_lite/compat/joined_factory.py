"""Energon's ``JoinedWebdatasetFactory``: a join of prepared datasets built in code.

An adapter over the metadataset ``join:`` entry (:mod:`energon_lite.metadataset.join`): the inner
factories and the joiner become the same join spec a ``join:`` entry writes, and ``build()``
loads it like any dataset. The first inner dataset is the primary (its samples, order and
shards); every other one is matched by sample key. A primary sample without a partner is
an error, unless ``nonmatch`` (an energon_lite addition, as on a ``join:`` entry) says
``skip`` (left out) or ``none`` (the joiner gets None). The spec and the key-match index are written
beside ``join_index`` (``<join_index>.cache/``): Energon's prepared join index itself is not
needed or read, so no ``energon prepare`` of a metadataset is needed either.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from energon_lite.compat.webdataset_factories import BaseCoreDatasetFactory
from energon_lite.errors import ConfigError
from energon_lite.loader.api import SavableDataset, get_train_dataset, get_val_dataset
from energon_lite.metadataset.join import NONMATCH, write_spec
from energon_lite.samples.resolver import trust_joiner
from energon_lite.sources.kinds import open_source
from energon_lite.sources.leaf import Leaf
from energon_lite.storage import StoragePath

T_sample = TypeVar("T_sample", covariant=True)


def _joiner_ref(joiner: Any) -> dict[str, str]:
    """``{__module__, __class__ | __function__}`` of an importable Sample class or function."""
    module, name = getattr(joiner, "__module__", None), getattr(joiner, "__qualname__", "")
    if not callable(joiner) or not module or not name or "<" in name or "." in name:
        raise ConfigError(
            f"JoinedWebdatasetFactory: joiner {joiner!r} must be a Sample class or a function "
            "defined at the top level of a module (worker processes import it by name)"
        )
    if isinstance(joiner, type):
        if not hasattr(joiner, "from_joined"):
            raise ConfigError(f"JoinedWebdatasetFactory: {name} has no from_joined()")
        return {"__module__": module, "__class__": name}
    return {"__module__": module, "__function__": name}


class JoinedWebdatasetFactory(Generic[T_sample]):
    """Energon's programmatic join: ``inner_datasets`` (a list: the joiner gets the samples
    positionally; a mapping: by name) joined by sample key with ``joiner``; ``nonmatch``
    (``error``, ``skip`` or ``none``) applies to every dataset after the first."""

    def __init__(
        self,
        inner_datasets: Sequence[BaseCoreDatasetFactory] | Mapping[str, BaseCoreDatasetFactory],
        *,
        training: bool,
        worker_config: Any,
        shuffle_over_epochs: int | None = 1,
        parallel_shard_iters: int | None = None,
        max_samples_per_sequence: int | None = None,
        subset: Any = None,
        join_index: str | os.PathLike[str],
        joiner: type | Callable[..., Any],
        nonmatch: str = "error",
    ) -> None:
        if nonmatch not in NONMATCH:
            raise ConfigError(
                f"JoinedWebdatasetFactory: nonmatch={nonmatch!r}; allowed: {NONMATCH}"
            )
        if subset is not None:
            raise ConfigError(
                "JoinedWebdatasetFactory(subset=...) is not supported; write the join as a "
                "metadataset join: entry with subset: on it (see docs/migration.md)"
            )
        named = list(inner_datasets.items()) if isinstance(inner_datasets, Mapping) else None
        factories: list[BaseCoreDatasetFactory] = (
            [f for _, f in named] if named else list(inner_datasets)  # type: ignore[arg-type]
        )
        if len(factories) < 2 or not all(isinstance(f, BaseCoreDatasetFactory) for f in factories):
            raise ConfigError(
                "JoinedWebdatasetFactory: inner_datasets needs at least two dataset factories "
                f"(e.g. StandardWebdatasetFactory), got {inner_datasets!r}"
            )
        ref = _joiner_ref(joiner)
        partners = [
            {
                "name": named[i][0] if named else None,
                "path": str(f.paths[0].resolve()),
                "split_part": f.split_part,
                "nonmatch": nonmatch if i else "error",
                "subflavors": f.subflavors,
                "split_config": f.leaf.split_config,
                "dataset_config": f.leaf.dataset_config,
            }
            for i, f in enumerate(factories)
        ]
        spec = {
            "version": 1,
            "partners": partners,
            "joiner": ref,
            "by_name": bool(named),
            "build_on_open": True,  # no metadataset to prepare: the index is made when opened
        }
        cache = Path(join_index).with_name(Path(join_index).name + ".cache")
        self.spec_path = write_spec(spec, cache)
        trust_joiner(self.spec_path, ref)  # the caller's own code
        self.inner_datasets = factories
        self.training = training
        self.worker_config = worker_config
        self.shuffle_over_epochs = shuffle_over_epochs
        self.parallel_shard_iters = parallel_shard_iters
        self.max_samples_per_sequence = max_samples_per_sequence
        self.split_part = factories[0].split_part
        self.leaf = Leaf(self.spec_path, self.split_part, subflavors=factories[0].subflavors)

    @property
    def paths(self) -> list[StoragePath]:
        return [f.paths[0] for f in self.inner_datasets]

    def __len__(self) -> int:
        """The joined samples of the split (the primary's, less unmatched ones)."""
        return len(open_source(self.leaf))

    def build(self, worker_rotation_offset: int = 0) -> SavableDataset:
        """The dataset of joined samples (no batching), shuffled when ``training``."""
        if worker_rotation_offset:
            raise ConfigError("worker_rotation_offset is not supported by energon_lite")
        common: dict[str, Any] = {
            "worker_config": self.worker_config,
            "batch_size": None,
            "split_part": self.split_part,
        }
        if not self.training:
            return get_val_dataset(self.spec_path, **common)
        return get_train_dataset(
            self.spec_path,
            shuffle_buffer_size=None,
            max_samples_per_sequence=self.max_samples_per_sequence,
            parallel_shard_iters=self.parallel_shard_iters,
            shuffle_over_epochs_multiplier=self.shuffle_over_epochs,
            **common,
        )

    def __str__(self) -> str:
        return f"{type(self).__name__}(paths={self.paths})"
