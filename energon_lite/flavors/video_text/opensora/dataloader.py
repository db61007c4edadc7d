"""``prepare_dataloader -> (loader, sampler)`` with Open-Sora's arguments, on our pipeline.

Epochs. The pipeline streams without end (each rank reads its share of the tables, pass
after pass, reshuffled each pass); ``len(loader)`` is the number of steps of an epoch,
the same on every rank, and iterating the loader yields that many batches, continuing
where the previous epoch (or a restored state) stopped. Steps per epoch: the batches the
tables supply per pass and rank - with buckets ``sum(keep_b * count_b / batch_size_b)``
over the buckets' sample counts (``keep`` from the synchronised mode's thinning), without
``rows / batch_size`` - divided by ``num_replicas`` (rounded down; at least 1).

``sampler.set_epoch(epoch)`` records the epoch (Open-Sora's loop calls it before each
epoch); the data order does not depend on it, it depends only on the stream position,
which ``sampler.state_dict()`` saves (the loader state, epoch and step) and
``sampler.load_state_dict()`` restores exactly, mid-epoch included.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from energon_lite.compat.arguments import get_savable_loader, get_train_dataset
from energon_lite.errors import ConfigError, StateError, logger
from energon_lite.flavors.video_text.bucket_weights import bucket_counts, split_shapes
from energon_lite.flavors.video_text.buckets import BucketId
from energon_lite.flavors.video_text.opensora.dataset import VariableVideoTextDataset
from energon_lite.flavors.video_text.task_encoder import VideoTextTaskEncoder
from energon_lite.loader.api import SavableLoader
from energon_lite.worker import WorkerConfig


class OpenSoraLoader:
    """Yields ``len(self)`` batches per ``iter()``: one epoch of the endless stream."""

    def __init__(self, loader: SavableLoader, steps_per_epoch: int) -> None:
        self.loader = loader
        self.steps_per_epoch = steps_per_epoch
        self.epoch = 0
        self.step = 0  # batches taken in the current epoch

    def __len__(self) -> int:
        return self.steps_per_epoch

    def __iter__(self) -> Iterator[Any]:
        if self.step >= self.steps_per_epoch:
            self.epoch, self.step = self.epoch + 1, 0
        stream = iter(self.loader)
        try:
            while self.step < self.steps_per_epoch:
                batch = next(stream)
                self.step += 1
                yield batch
        finally:
            stream.close()  # type: ignore[attr-defined]  # a generator

    def state_dict(self) -> dict[str, Any]:
        return {"loader": self.loader.save_state_rank(), "epoch": self.epoch, "step": self.step}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if not isinstance(state, Mapping) or set(state) != {"loader", "epoch", "step"}:
            raise StateError(f"not a prepare_dataloader sampler state: {str(state)[:200]!r}")
        self.loader.restore_state_rank(state["loader"])
        self.epoch, self.step = int(state["epoch"]), int(state["step"])


class _EpochSampler:
    """What Open-Sora's samplers offer a training loop: epochs, length, state."""

    def __init__(
        self,
        dataset: VariableVideoTextDataset,
        num_replicas: int | None,
        rank: int | None,
        shuffle: bool,
        seed: int,
        drop_last: bool,
    ) -> None:
        if not isinstance(dataset, VariableVideoTextDataset):
            raise ConfigError(f"expected a VariableVideoTextDataset, got {type(dataset).__name__}")
        default = WorkerConfig.default_worker_config(0)
        self.num_replicas = default.world_size if num_replicas is None else num_replicas
        self.rank = default.rank if rank is None else rank
        if not 0 <= self.rank < self.num_replicas:
            raise ConfigError(f"rank={self.rank} must be in [0, num_replicas={self.num_replicas})")
        self.dataset, self.shuffle, self.seed, self.drop_last = dataset, shuffle, seed, drop_last
        self.loader: OpenSoraLoader | None = None

    def _bound(self) -> OpenSoraLoader:
        if self.loader is None:
            raise ConfigError("this sampler has no loader yet; make both with prepare_dataloader")
        return self.loader

    def set_epoch(self, epoch: int) -> None:
        self._bound().epoch = int(epoch)

    def state_dict(self, num_steps: int | None = None) -> dict[str, Any]:
        """The exact position (``num_steps``, Open-Sora 1.2's argument, is not needed)."""
        return self._bound().state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._bound().load_state_dict(state)

    def __len__(self) -> int:
        return self.steps_per_epoch()

    def steps_per_epoch(self) -> int:
        raise NotImplementedError

    def batch_size(self) -> int | None:
        return None

    def make_loader(
        self,
        num_workers: int = 0,
        pin_memory: bool = False,
        prefetch_factor: int | None = None,
        *,
        shuffle_buffer_size: int | None = 100,
        max_samples_per_sequence: int | None = 100,
        **options: Any,
    ) -> OpenSoraLoader:
        """Build the loader this sampler describes (``prepare_dataloader`` calls it)."""
        te = self.task_encoder()
        options["shuffle_buffer_size"] = shuffle_buffer_size if self.shuffle else None
        options["max_samples_per_sequence"] = max_samples_per_sequence
        config = WorkerConfig(self.rank, self.num_replicas, num_workers, seed_offset=self.seed)
        dataset = get_train_dataset(
            self.dataset.loader_path(),
            worker_config=config,
            batch_size=self.batch_size(),
            batch_drop_last=self.drop_last,
            task_encoder=te,
            split_part=self.dataset.split_part,
            **options,
        )
        loader_options: dict[str, Any] = {"pin_memory": pin_memory}
        if prefetch_factor is not None:
            loader_options["prefetch_factor"] = prefetch_factor
        savable = get_savable_loader(dataset, **loader_options)
        self.loader = OpenSoraLoader(savable, self.steps_per_epoch())
        return self.loader

    def task_encoder(self) -> Any:
        raise NotImplementedError


class VariableBatchSampler(_EpochSampler):
    """Open-Sora's bucket sampler: ``bucket_config`` batches, synchronised across ranks."""

    def __init__(
        self,
        dataset: VariableVideoTextDataset,
        bucket_config: Mapping[Any, Any],
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        verbose: bool = False,
        *,
        sync_buckets: bool = True,
    ) -> None:
        super().__init__(dataset, num_replicas, rank, shuffle, seed, drop_last)
        self.bucket_config = bucket_config
        self.verbose = verbose
        te = dataset.task_encoder(bucket_config, seed=seed, sync_buckets=sync_buckets)
        assert isinstance(te, VideoTextTaskEncoder)  # a bucket config gives the bucketed one
        self._te = te
        tables = dataset.table_splits()
        # every rank computes the same from the same tables: no communication needed
        self.bucket_sync = self._te.bucket_sync_for(tables) if sync_buckets else None
        self.counts: Counter[BucketId] = Counter()
        for folder, split in tables:
            shapes, counts = split_shapes(folder, split)
            self.counts.update(
                bucket_counts(self._te.assigner, shapes, counts, self._te.frames_available)
            )
        if verbose:
            sizes = {
                f"{b.num_frames}x{b.height}x{b.width}": round(c, 1) for b, c in self.counts.items()
            }
            logger.info("samples per bucket: %s", sizes)

    def task_encoder(self) -> VideoTextTaskEncoder:
        return self._te

    def steps_per_epoch(self) -> int:
        keep = self._te.keep or {}
        per_pass = sum(keep.get(b, 1.0) * c / b.batch_size for b, c in self.counts.items())
        return max(1, int(per_pass // self.num_replicas))

    def make_loader(self, *args: Any, **options: Any) -> OpenSoraLoader:
        options.setdefault("bucket_sync", self.bucket_sync)
        return super().make_loader(*args, **options)


class StatefulDistributedSampler(_EpochSampler):
    """The fixed-shape mode's sampler: ``batch_size`` clips per step."""

    def __init__(
        self,
        dataset: VariableVideoTextDataset,
        batch_size: int,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        super().__init__(dataset, num_replicas, rank, shuffle, seed, drop_last)
        if batch_size < 1:
            raise ConfigError(f"{batch_size=} must be >= 1")
        self._batch_size = batch_size
        self._te = dataset.task_encoder(None)

    def task_encoder(self) -> Any:
        return self._te

    def batch_size(self) -> int:
        return self._batch_size

    def steps_per_epoch(self) -> int:
        per_rank = len(self.dataset) // self.num_replicas
        steps = per_rank // self._batch_size if self.drop_last else -(-per_rank // self._batch_size)
        return max(1, steps)


def prepare_dataloader(
    dataset: VariableVideoTextDataset,
    batch_size: int | None = None,
    shuffle: bool = True,
    seed: int = 1024,
    drop_last: bool = False,
    pin_memory: bool = False,
    num_workers: int = 0,
    process_group: Any = None,
    bucket_config: Mapping[Any, Any] | None = None,
    num_bucket_build_workers: int = 1,
    prefetch_factor: int | None = None,
    *,
    sync_buckets: bool = True,
    shuffle_buffer_size: int | None = 100,
    max_samples_per_sequence: int | None = 100,
    **kwargs: Any,
) -> tuple[OpenSoraLoader, _EpochSampler]:
    """Open-Sora's ``prepare_dataloader``: ``(loader, sampler)`` (see the module docstring).

    ``process_group`` gives rank and world size (default: torch.distributed's, or 0 of
    1). ``num_bucket_build_workers`` is accepted and unused (buckets need no build pass).
    ``shuffle=False`` turns off the shuffle buffer (slices are still read in a per-pass
    order). ``sync_buckets=False`` lets each rank fill its own buckets (the per-rank mode).
    """
    if kwargs:
        raise ConfigError(f"prepare_dataloader: unknown arguments {sorted(kwargs)}")
    del num_bucket_build_workers
    group = WorkerConfig.default_worker_config(0, process_group)
    sampler: _EpochSampler
    if bucket_config is not None:
        sampler = VariableBatchSampler(
            dataset, bucket_config, group.world_size, group.rank, shuffle, seed, drop_last,
            sync_buckets=sync_buckets,
        )  # fmt: skip
    else:
        if batch_size is None:
            raise ConfigError("prepare_dataloader needs batch_size or bucket_config")
        sampler = StatefulDistributedSampler(
            dataset, batch_size, group.world_size, group.rank, shuffle, seed, drop_last
        )
    loader = sampler.make_loader(
        num_workers,
        pin_memory,
        prefetch_factor,
        shuffle_buffer_size=shuffle_buffer_size,
        max_samples_per_sequence=max_samples_per_sequence,
    )
    return loader, sampler
