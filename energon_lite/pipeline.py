"""``DatasetPipeline``: the one place where stages are wired, from the TaskEncoder and arguments.

A pipeline is built once per worker (inside the worker process) from a ``WorkerSlot``::

    Reader per leaf -> [Blend] -> [ShuffleBuffer] -> Encode -> [Pack] -> GroupBatch | Batch
        -> [Map(encode_batch)] -> [Limit]

Stages in brackets appear only when asked for (several leaves, a buffer size, an overridden
hook, a limit). ``fingerprint()`` lists everything a saved state must match.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from energon_lite.errors import ConfigError, FailureTracker
from energon_lite.index.meta import META_DIR
from energon_lite.kinds import open_source
from energon_lite.leaf import Leaf
from energon_lite.reader import Reader
from energon_lite.sample_factory import SampleFactory
from energon_lite.stage import Stage
from energon_lite.stages.batch import Batch
from energon_lite.stages.encode import Encode, LeafSpec
from energon_lite.stages.limit import Limit
from energon_lite.stages.map import Map
from energon_lite.stages.shuffle import ShuffleBuffer
from energon_lite.task_encoder import TaskEncoder
from energon_lite.worker import WorkerConfig, WorkerSlot


@dataclass
class PipelineOptions:
    training: bool
    batch_size: int | None
    batch_drop_last: bool = False
    shuffle_buffer_size: int | None = None
    max_samples_per_sequence: int | None = None
    parallel_shard_iters: int | None = None
    repeat: bool = True
    packing_buffer_size: int | None = None
    limit: int | None = None
    failure_tolerance: int = 100
    bucket_sync: dict[str, Any] | None = None  # GroupBatch's synchronised mode (BucketSync)


class Pipeline(Protocol):
    """What a SavableDataset runs: one chain per worker, and what a state must match."""

    def build(self, slot: WorkerSlot) -> Stage: ...

    def fingerprint(self) -> dict[str, Any]: ...

    def batches_per_epoch(self, worker_config: WorkerConfig, epoch: int = 0, /) -> int: ...


class DatasetPipeline:
    """Opens the leaves once (in the creating process) and builds worker chains on demand."""

    def __init__(
        self,
        leaves: list[Leaf],
        blend_mode: str,
        task_encoder: TaskEncoder,
        options: PipelineOptions,
        worker_config: WorkerConfig,
    ) -> None:
        if not leaves:
            raise ConfigError("a dataset needs at least one leaf")
        self.leaves = leaves
        self.blend_mode = blend_mode
        self.task_encoder = task_encoder
        self.options = options
        self.datasets = [open_source(leaf) for leaf in leaves]
        self.specs = [  # dataset.yaml subflavors, overridden by the metadataset's
            LeafSpec(
                SampleFactory(ds.config, ds.root / META_DIR),
                {**(ds.config.get("subflavors") or {}), **(leaf.subflavors or {})} or None,
            )
            for ds, leaf in zip(self.datasets, leaves)
        ]
        if task_encoder.overrides("encode_sample") and task_encoder.overrides("preencode_sample"):
            raise ConfigError(
                f"{type(task_encoder).__name__} overrides both encode_sample and preencode_sample; "
                "override encode_sample without packing, or preencode_sample with packing"
            )
        self._check_rank_has_work(worker_config)

    # wiring -------------------------------------------------------------------------------

    def readers(self, slot: WorkerSlot) -> list[Reader]:
        opts = self.options
        open_slices = opts.parallel_shard_iters or (4 if opts.training else 1)
        return [
            Reader(
                dataset,
                leaf_id=i,
                seed=slot.seed,
                worker_index=slot.global_worker_id,
                num_workers=slot.num_global_workers,
                # val: contiguous, balanced ranges so that every worker gets a share
                max_samples_per_sequence=opts.max_samples_per_sequence
                if opts.training
                else max(1, -(-len(dataset) // slot.num_global_workers)),
                shuffle=opts.training,
                repeat=opts.training and opts.repeat and self.blend_mode != "epochized",
                open_slices=open_slices if opts.training else 1,
                shuffle_over_epochs_multiplier=leaf.shuffle_over_epochs_multiplier,
                start_epoch=slot.epoch,
            )
            for i, (dataset, leaf) in enumerate(zip(self.datasets, self.leaves))
        ]

    def build(self, slot: WorkerSlot) -> Stage:
        """The chain of one worker, fresh (call ``restore_state`` on it to resume)."""
        opts, te = self.options, self.task_encoder

        def failures() -> FailureTracker:
            # one per stage: a success in one stage must not reset another's failure streak
            return FailureTracker(opts.failure_tolerance)

        readers = self.readers(slot)
        single = len(readers) == 1 and self.blend_mode != "epochized"  # quotas need the Blend
        stage: Stage = readers[0] if single else self._blend(readers, slot)
        if opts.training and opts.shuffle_buffer_size:
            stage = ShuffleBuffer(stage, opts.shuffle_buffer_size, slot.seed, slot.global_worker_id)
        hook = "preencode_sample" if opts.packing_buffer_size else "encode_sample"
        stage = Encode(stage, self.specs, te, slot.seed, failures(), hook)
        if opts.packing_buffer_size:
            from energon_lite.stages.pack import Pack

            stage = Pack(stage, opts.packing_buffer_size, te, slot.seed, failures())
        if te.overrides("batch_group_criterion"):
            from energon_lite.stages.group_batch import BucketSync, GroupBatch

            sync = BucketSync.for_slot(opts.bucket_sync, slot)
            stage = GroupBatch(
                stage, te.batch_group_criterion, te.batch, opts.batch_drop_last, failures(), sync
            )
        elif opts.batch_size is not None:
            stage = Batch(stage, opts.batch_size, te.batch, opts.batch_drop_last, failures())
        if te.overrides("encode_batch"):
            stage = Map(stage, te.encode_batch, "encode_batch", failures())
        if opts.limit is not None:  # per rank; the loader polls workers round robin
            stage = Limit(stage, -(-(opts.limit - slot.worker_id) // slot.num_workers))
        stage.restore_state(None)
        return stage

    def _blend(self, readers: list[Reader], slot: WorkerSlot) -> Stage:
        from energon_lite.stages.blend import Blend

        if self.blend_mode == "concat":
            return Blend.concat(readers)
        if self.blend_mode == "epochized":
            quotas = [leaf.repetitions or 0.0 for leaf in self.leaves]
            return Blend.epochized(
                readers, quotas, slot.seed, slot.global_worker_id, repeat=self.options.repeat
            )
        weights = [leaf.weight or 0.0 for leaf in self.leaves]
        return Blend.weighted(readers, weights, slot.seed, slot.global_worker_id)

    # facts about the pipeline ---------------------------------------------------------------

    def fingerprint(self) -> dict[str, Any]:
        opts = self.options
        return {
            "datasets": [
                f"{ds.split_part}:{ds.fingerprint()}"  # content, not location: copies restore
                for leaf, ds in zip(self.leaves, self.datasets)
            ],
            "blend_mode": self.blend_mode,
            "weights": [
                leaf.weight if leaf.weight is not None else leaf.repetitions for leaf in self.leaves
            ],
            "training": opts.training,
            "batch_size": opts.batch_size,
            "batch_drop_last": opts.batch_drop_last,
            "shuffle_buffer_size": opts.shuffle_buffer_size if opts.training else None,
            "max_samples_per_sequence": opts.max_samples_per_sequence,
            "parallel_shard_iters": opts.parallel_shard_iters,
            "packing_buffer_size": opts.packing_buffer_size,
            "repeat": opts.repeat,
            "limit": opts.limit,
        }

    def _check_rank_has_work(self, wc: WorkerConfig) -> None:
        total_slices = 0
        for worker in range(wc.workers_per_rank):
            for reader in self.readers(wc.slot(worker)):
                total_slices += reader.worker_slice_count()
        if total_slices == 0:
            sizes = [len(ds) for ds in self.datasets]
            raise ConfigError(
                f"rank {wc.rank} has no data: the split has {sum(sizes)} samples in "
                f"{sum(r.num_slices for r in self.readers(wc.slot(0)))} slices of at most "
                f"max_samples_per_sequence={self.options.max_samples_per_sequence}, fewer than "
                f"world_size x num_workers = {wc.world_size} x {wc.workers_per_rank}; use fewer "
                "ranks or workers, or a smaller max_samples_per_sequence"
            )

    def samples_per_epoch(self, wc: WorkerConfig, epoch: int = 0) -> list[int]:
        """Samples each worker of this rank reads in ``epoch`` (before blending)."""
        counts = []
        for worker in range(wc.workers_per_rank):
            total = 0
            for reader in self.readers(wc.slot(worker, epoch)):
                total += int(reader.samples_per_worker(epoch)[reader.worker_index])
            counts.append(total)
        return counts

    def batches_per_epoch(self, wc: WorkerConfig, epoch: int = 0) -> int:
        """Batches this rank yields per epoch (exact for one dataset; a blend is estimated)."""
        per_worker = self.samples_per_epoch(wc, epoch)
        if self.blend_mode == "epochized":
            scale = sum(
                (leaf.repetitions or 0) * len(ds) for leaf, ds in zip(self.leaves, self.datasets)
            )
            total = sum(len(ds) for ds in self.datasets)
            per_worker = [round(n * scale / max(1, total)) for n in per_worker]
        bs = self.options.batch_size
        if bs is None:
            batches = sum(per_worker)
        elif self.options.batch_drop_last:
            batches = sum(n // bs for n in per_worker)
        else:
            batches = sum(-(-n // bs) for n in per_worker)
        if self.options.limit is not None:
            batches = min(batches, self.options.limit)
        return batches
