"""``DatasetPipeline``: the one place where stages are wired, from the TaskEncoder and arguments.

A pipeline is built once per worker (inside the worker process) from a ``WorkerSlot``::

    Reader per leaf -> [Blend] -> [ShuffleBuffer] -> Encode -> [Cost] -> [Pack]
        -> GroupBatch | Batch -> [Map(encode_batch)] -> [Limit]

With ``batch_composition`` stratified or per_source the shuffle buffers sit between each
reader and the blend (a composed batch takes the blend's samples in order); ``Cost`` reports
sample costs to a blend with ``weight_unit: tokens``.

Stages in brackets appear only when asked for (several leaves, a buffer size, an overridden
hook, a limit). ``fingerprint()`` lists everything a saved state must match.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from energon_lite.decode.decoder import require_av
from energon_lite.errors import MAX_SKIP_FRACTION, ConfigError, failure_trackers
from energon_lite.pipeline import lengths
from energon_lite.quotas import share
from energon_lite.samples.factory import LeafSpec, SampleFactory
from energon_lite.shards.meta import META_DIR
from energon_lite.sources.kinds import open_source
from energon_lite.sources.leaf import Leaf
from energon_lite.stages.base import Stage
from energon_lite.stages.plan import Node
from energon_lite.stages.reader import Reader
from energon_lite.storage.session import session
from energon_lite.task_encoder.base import TaskEncoder
from energon_lite.worker import CanonicalLayout, WorkerConfig, WorkerSlot

log = logging.getLogger(__name__)

# The stages that only some chains have (blends, packing, grouping, limits, canonical phases,
# costs, encode_batch) are imported where a plan takes them: a plain image loop loads the
# modules its chain runs and no others (tests/test_import_footprint.py), which is part of the
# time to its first batch.


@dataclass
class PipelineOptions:
    """The loader's arguments that shape a chain, as the pipeline is built from them."""

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
    max_skip_fraction: float | None = MAX_SKIP_FRACTION  # of a worker's pass (SkipBudget)
    bucket_sync: dict[str, Any] | None = None  # GroupBatch's synchronised mode (BucketSync)
    # how fresh readers deal samples to global workers (energon_lite.stages.slices): "ranges";
    # "slices" is the earlier dealing (a restored state always keeps its own)
    dealing: str = "ranges"
    # how fresh blend_epochized runs round the fraction of a last pass (energon_lite.quotas):
    # "per_worker" as Energon; "exact" is the rounding of states saved before it was
    # recorded (a restored state always keeps its own)
    epochized_rounding: str = "per_worker"
    # which random stream fresh weighted blends draw from (WeightedBlend): "energon" draws as
    # Energon does; "counter" is the stream of states saved before it was recorded
    blend_stream: str = "energon"
    canonical_layout: CanonicalLayout | None = None  # the layout that defines the batches


def blend_options(leaves: list[Leaf], blend_mode: str) -> tuple[str, str]:
    """The blend's ``batch_composition`` and ``weight_unit``: what the metadataset declares
    (its outermost blend wins over a nested one), the defaults (random, samples) elsewhere."""
    found = []
    for attribute, default in (("composition", "random"), ("weight_unit", "samples")):
        values = {getattr(leaf, attribute) for leaf in leaves} - {None}
        if len(values) > 1:
            name = "batch_composition" if attribute == "composition" else attribute
            raise ConfigError(
                f"the blend's nested metadatasets declare different {name}s {sorted(values)}; "
                "declare one on the outermost blend"
            )
        found.append(values.pop() if values else default)
    if blend_mode == "epochized" and found != ["random", "samples"]:
        raise ConfigError(
            "batch_composition and weight_unit are options of blend:, not of blend_epochized"
        )
    return found[0], found[1]


def by_source(
    criterion: Callable[[Any], tuple[Any, int]],
) -> Callable[[Any], tuple[Any, int]]:
    """A group criterion whose groups are per source: (leaf, key) (batch_composition:
    per_source with grouped batching)."""
    from energon_lite.stages.routing import leaf_of

    def grouped(sample: Any) -> tuple[Any, int]:
        key, size = criterion(sample)
        restore_key = (
            sample.get("__restore_key__")
            if isinstance(sample, dict)
            else getattr(sample, "__restore_key__", None)
        )
        return (leaf_of(restore_key), key), size

    return grouped


class Pipeline(Protocol):
    """What a SavableDataset runs: one chain per worker, described once by ``plan(slot)``
    (``build`` and ``state_shape`` are that plan built and shaped), and what a saved state
    must match. Every pipeline (this module's, the wrappers', a flavor's) has all of it, so
    no caller asks whether it has a part."""

    @property
    def leaves(self) -> list[Leaf]:
        """Its leaf datasets in leaf-id order ([] for a kind without leaves)."""
        ...

    @property
    def task_encoder(self) -> TaskEncoder | None:
        """Whose hooks its chains run (None: no task encoder)."""
        ...

    @property
    def training(self) -> bool:
        """Whether it trains (shuffled, repeating) rather than validates."""
        ...

    def plan(self, slot: WorkerSlot) -> Node: ...

    def build(self, slot: WorkerSlot) -> Stage: ...

    def state_shape(self, slot: WorkerSlot) -> dict[str, Any]: ...

    def canonical(self, slot: WorkerSlot) -> CanonicalLayout | None:
        """The canonical layout ``slot``'s chain runs under, or None."""
        ...

    def readers(self, slot: WorkerSlot) -> list[Reader] | None:
        """``slot``'s reader of each leaf, or None where the chain's readers are not its
        own to check (a composition of wrapped datasets, a kind without readers)."""
        ...

    def fingerprint(self) -> dict[str, Any]: ...

    def batches_per_epoch(self, worker_config: WorkerConfig, epoch: int = 0, /) -> int: ...

    def items_per_worker(self, worker_config: WorkerConfig, epoch: int = 0, /) -> list[int]:
        """What each worker of the rank yields per epoch (batches, or samples unbatched)."""
        ...


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
        self.global_error_handler = worker_config.global_error_handler
        self.datasets = [open_source(leaf) for leaf in leaves]
        self.specs = [  # dataset.yaml subflavors, overridden by the metadataset's
            LeafSpec(
                SampleFactory(ds.config, ds.root / META_DIR),
                {**(ds.config.get("subflavors") or {}), **(leaf.subflavors or {})} or None,
            )
            for ds, leaf in zip(self.datasets, leaves)
        ]
        for ds, spec in zip(self.datasets, self.specs):
            if spec.factory.parts is not None:  # a crude dataset's: checked as they decode
                require_av(str(ds.root), spec.factory.parts)
        for spec, leaf, ds in zip(self.specs, leaves, self.datasets):
            spec.factory.shard_offsets = getattr(ds, "shard_offsets", None)
            if spec.factory.crude:  # what cookers read by file name (all opened lazily)
                from energon_lite.cache.file_store import open_file_store, primary_file_store

                spec.factory.primary = primary_file_store(leaf.path, ds)
                spec.factory.aux.update(getattr(ds, "aux_stores", None) or {})
                for name, src in (leaf.aux or {}).items():
                    spec.factory.aux[name] = open_file_store(src, leaf.path.parent)
        if task_encoder.overrides("encode_sample") and task_encoder.overrides("preencode_sample"):
            raise ConfigError(
                f"{type(task_encoder).__name__} overrides both encode_sample and preencode_sample; "
                "override encode_sample without packing, or preencode_sample with packing"
            )
        self.composition, self.weight_unit = blend_options(leaves, blend_mode)
        if self.composition != "random" and options.packing_buffer_size:
            raise ConfigError(
                f"batch_composition: {self.composition} makes batches of samples; with packing "
                "(packing_buffer_size) a batch holds packs: use weight_unit: tokens to steer the "
                "mix of packed tokens instead"
            )
        if self.composition == "stratified" and task_encoder.overrides("batch_group_criterion"):
            raise ConfigError(
                "batch_composition: stratified with grouped batching (batch_group_criterion) is "
                "not supported: a group's samples are known only after encoding; use per_source "
                "(each group's batches from one source) or random"
            )
        self._check_rank_has_work(worker_config)

    @property
    def training(self) -> bool:
        return self.options.training

    # wiring -------------------------------------------------------------------------------

    def readers(self, slot: WorkerSlot) -> list[Reader]:
        """This worker's reader of each leaf (constructed only: no I/O until they start)."""
        return [node.build() for node in self._reader_nodes(slot)]  # type: ignore[misc]

    def _reader_nodes(self, slot: WorkerSlot) -> list[Node]:
        opts = self.options
        open_slices = opts.parallel_shard_iters or (4 if opts.training else 1)
        nodes = []
        before = 0  # samples of the leaves before this one (Energon's worker rotation)
        for i, (dataset, leaf) in enumerate(zip(self.datasets, self.leaves)):
            settings: dict[str, Any] = {
                "leaf_id": slot.leaf_base + i,
                "seed": slot.seed,
                "worker_index": slot.global_worker_id,
                "num_workers": slot.num_global_workers,
                # val: contiguous, balanced ranges so that every worker gets a share
                "max_samples_per_sequence": opts.max_samples_per_sequence
                if opts.training
                else max(1, -(-len(dataset) // slot.num_global_workers)),
                "shuffle": opts.training,
                "repeat": opts.training and opts.repeat and self.blend_mode != "epochized",
                "open_slices": open_slices if opts.training else 1,
                "shuffle_over_epochs_multiplier": leaf.shuffle_over_epochs_multiplier,
                "start_epoch": slot.epoch,
                "samples_before": before,
                "dealing": opts.dealing,
            }
            before += len(dataset)
            nodes.append(
                Node(Reader, partial(Reader, dataset, **settings), settings={"leaf": i, **settings})
            )
        return nodes

    def canonical(self, slot: WorkerSlot) -> CanonicalLayout | None:
        """The canonical layout when ``slot``'s layout reproduces it (the worker then runs
        :class:`Phases` over its logical pipelines), else None (one chain of its own)."""
        layout = self.options.canonical_layout
        if layout is None or not layout.reproduced_by(slot.world_size, slot.num_workers):
            return None
        return layout

    def plan(self, slot: WorkerSlot, per_phase: int = 0) -> Node:
        """The chain of one worker, as nodes (``plan(slot).build()`` makes it).

        ``per_phase`` > 0: ``slot`` is one logical pipeline of a canonical layout, run under
        :class:`Phases` with ``per_phase`` - 1 others of its phase: its batches are lists of
        ``1 / per_phase`` of the batch size (a ``batch_group_criterion``'s sizes are per
        canonical rank already), and the batch hooks run on the joined batch."""
        # the chain's stages, imported where a chain is planned (in the workers when there are
        # any), not where the loader is built
        from energon_lite.stages.batch import Batch
        from energon_lite.stages.encode import Encode
        from energon_lite.stages.shuffle import ShuffleBuffer

        opts, te = self.options, self.task_encoder
        layout = self.canonical(slot) if not per_phase else None
        if layout is not None:
            return self._phases(slot, layout)
        if per_phase:
            from energon_lite.stages.phases import as_list

        collate = as_list if per_phase else te.batch

        failures = failure_trackers(
            opts.failure_tolerance,
            self.global_error_handler,
            opts.max_skip_fraction,
            f"rank {slot.rank} worker {slot.worker_id}",
        )

        readers = self._reader_nodes(slot)
        # several leaves, or quotas (which need the blend even for one leaf): a blend
        single = len(readers) == 1 and self.blend_mode != "epochized"
        # a composed batch takes its samples straight from the blend: shuffle each source
        # below it instead of the blend's output
        composed = not single and self.composition != "random"
        if composed and opts.training and opts.shuffle_buffer_size:
            size = opts.shuffle_buffer_size
            readers = [
                Node(
                    ShuffleBuffer,
                    lambda s, i=i: ShuffleBuffer(s, size, slot.seed, slot.global_worker_id, i),
                    [reader],
                    settings={"size": size},
                )
                for i, reader in enumerate(readers)
            ]
        by_cost = self.weight_unit == "tokens" and not single
        node = readers[0] if single else self._blend(readers, slot, by_cost, per_phase)

        def then(cls: type[Stage], make: Callable[[Stage], Stage], **settings: Any) -> None:
            nonlocal node
            node = Node(cls, make, [node], settings=settings)

        if opts.training and opts.shuffle_buffer_size and not composed:
            size = opts.shuffle_buffer_size
            then(
                ShuffleBuffer,
                lambda s: ShuffleBuffer(s, size, slot.seed, slot.global_worker_id),
                size=size,
            )
        # with packing, the per-sample hook runs before the packer: preencode_sample, or an
        # overridden encode_sample in its place (Energon's behaviour)
        hook = "encode_sample"
        if opts.packing_buffer_size and not te.overrides("encode_sample"):
            hook = "preencode_sample"
        counts = opts.batch_size is None and not te.overrides("batch_group_criterion")
        then(
            Encode,
            lambda s: Encode(
                s,
                self.specs,
                te,
                slot.seed,
                failures(getattr(te, hook)),
                hook,
                counts,
                slot.leaf_base,
                slot.global_worker_id,
            ),
            hook=hook,
            packing=bool(opts.packing_buffer_size),
        )
        if by_cost:
            from energon_lite.stages.cost import Cost

            names = [str(leaf.path) for leaf in self.leaves]
            then(Cost, lambda s: Cost(s, te.sample_cost, names, slot.leaf_base))
        if opts.packing_buffer_size:
            from energon_lite.stages.pack import Pack

            size = opts.packing_buffer_size
            then(
                Pack,
                lambda s: Pack(s, size, te, slot.seed, failures(te.pack_selected_samples), hook),
                size=size,
            )
        if te.overrides("batch_group_criterion"):
            from energon_lite.stages.bucket_sync import BucketSync
            from energon_lite.stages.group_batch import GroupBatch

            sync = BucketSync.for_slot(opts.bucket_sync, slot)
            then(
                GroupBatch,
                lambda s: GroupBatch(
                    s,
                    by_source(te.batch_group_criterion)
                    if self.composition == "per_source" and not single
                    else te.batch_group_criterion,
                    collate,
                    opts.batch_drop_last,
                    failures(te.batch),
                    sync,
                    "pack_selected_samples" if opts.packing_buffer_size else hook,
                ),
                criterion=te.batch_group_criterion,
                collate=collate,
                drop_last=opts.batch_drop_last,
            )
        elif opts.batch_size is not None:
            bs = opts.batch_size // max(1, per_phase)
            then(
                Batch,
                lambda s: Batch(
                    s, bs, collate, opts.batch_drop_last, failures(te.batch), slab=not per_phase
                ),
                batch_size=bs,
                collate=collate,
                drop_last=opts.batch_drop_last,
            )
        if per_phase:
            return node
        if te.overrides("encode_batch"):
            from energon_lite.stages.map import Map

            then(
                Map,
                lambda s: Map(s, te.encode_batch, "encode_batch", failures(te.encode_batch)),
                fn=te.encode_batch,
            )
        if opts.limit is not None:  # per rank; the loader polls workers round robin
            from energon_lite.stages.limit import Limit

            limit = -(-(opts.limit - slot.worker_id) // slot.num_workers)
            then(Limit, lambda s: Limit(s, limit), length=opts.limit)
        return node

    def _phases(self, slot: WorkerSlot, layout: CanonicalLayout, shape_only: bool = False) -> Node:
        """A physical worker's chain under a canonical layout: its logical pipelines, joined
        phase by phase (:class:`Phases`), then ``encode_batch`` on the joined batch.
        ``shape_only``: the first pipeline's plan stands for all (for ``shape()``)."""
        from energon_lite.stages.map import Map
        from energon_lite.stages.phases import Phases

        per_phase = layout.ranks // slot.world_size
        te = self.task_encoder
        grouped = te.overrides("batch_group_criterion")
        rows = None if grouped else self.options.batch_size  # the joined batch's size
        failures = failure_trackers(
            self.options.failure_tolerance,
            self.global_error_handler,
            self.options.max_skip_fraction,
            f"rank {slot.rank} worker {slot.worker_id}",
        )
        slots = layout.slots(slot)
        if shape_only:
            pipelines = [self.plan(slots[0], per_phase)] * len(slots)
        else:
            pipelines = [self.plan(logical, per_phase) for logical in slots]
        spreads = [(logical.worker_id, logical.num_workers) for logical in slots]
        node = Node(
            Phases,
            lambda ps: Phases(ps, per_phase, te.batch, failures(te.batch), rows, spreads),
            pipelines,
            several=True,
            settings={"batch_size": self.options.batch_size, "collate": te.batch},
        )
        if te.overrides("encode_batch"):
            node = Node(
                Map,
                lambda s: Map(s, te.encode_batch, "encode_batch", failures(te.encode_batch)),
                [node],
                settings={"fn": te.encode_batch},
            )
        return node

    def build(self, slot: WorkerSlot) -> Stage:
        """The chain of one worker, not started (``restore_state(None | state)`` starts it)."""
        return self.plan(slot).build()

    def state_shape(self, slot: WorkerSlot) -> dict[str, Any]:
        """The shape a saved state of ``slot``'s chain must have (no chain is built)."""
        layout = self.canonical(slot)
        if layout is not None:  # the logical pipelines share one shape: plan it once
            return self._phases(slot, layout, shape_only=True).shape()
        return self.plan(slot).shape()

    def _blend(self, readers: list[Node], slot: WorkerSlot, by_cost: bool, per_phase: int) -> Node:
        """The blend of ``slot``'s pipeline; a canonical layout's logical pipeline
        (``per_phase`` > 0) plans its composed batches for its own share of the batch."""
        if self.blend_mode == "concat":
            from energon_lite.stages.concat import Concat

            return Node(Concat, Concat, readers, several=True)
        if self.blend_mode == "epochized":
            from energon_lite.stages.blend_epochized import EpochizedBlend

            quotas = [leaf.repetitions or 0.0 for leaf in self.leaves]
            repeat, rounding = self.options.repeat, self.options.epochized_rounding
            return Node(
                EpochizedBlend,
                lambda rs: EpochizedBlend(
                    rs, quotas, slot.seed, slot.global_worker_id, repeat=repeat, rounding=rounding
                ),
                readers,
                several=True,
                settings={
                    "repetitions": [leaf.repetitions for leaf in self.leaves],
                    "repeat": repeat,
                },
            )
        from energon_lite.stages.blend_weighted import WeightedBlend

        weights = [leaf.weight or 0.0 for leaf in self.leaves]
        grouped = self.task_encoder.overrides("batch_group_criterion")
        # grouped per_source: the groups are made per source (by_source), the draws by weight
        composition = "random" if grouped else self.composition
        size = self.options.batch_size
        if size is not None and per_phase:
            size //= per_phase
        return Node(
            WeightedBlend,
            lambda rs: WeightedBlend(
                rs,
                weights,
                slot.seed,
                slot.global_worker_id,
                composition=composition,
                batch_size=size,
                by_cost=by_cost,
                stream=self.options.blend_stream,
            ),
            readers,
            several=True,
            settings={"weights": [leaf.weight for leaf in self.leaves]},
        )

    # facts about the pipeline ---------------------------------------------------------------

    def fingerprint(self) -> dict[str, Any]:
        from energon_lite.metadataset.schedule import describe

        opts = self.options
        return {
            "datasets": [
                f"{ds.split_part}:{ds.fingerprint()}"  # content, not location: copies restore
                for leaf, ds in zip(self.leaves, self.datasets)
            ],
            "blend_mode": self.blend_mode,
            "weights": [
                describe(leaf.weight) if leaf.weight is not None else leaf.repetitions
                for leaf in self.leaves
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
            # only where set, so that the states of loaders without them still match
            **({"batch_composition": self.composition} if self.composition != "random" else {}),
            **({"weight_unit": self.weight_unit} if self.weight_unit != "samples" else {}),
            **(
                {}
                if opts.canonical_layout is None
                else {
                    "canonical_layout": [opts.canonical_layout.ranks, opts.canonical_layout.workers]
                }
            ),
        }

    def _check_rank_has_work(self, wc: WorkerConfig) -> None:
        workers = wc.world_size * wc.workers_per_rank
        for ds in self.datasets:
            told = (f"{ds.root}:{ds.split_part}", len(ds), workers)
            # once per split and layout in a process, not once per loader or worker
            if 0 < len(ds) < workers and session().tell_once(told):
                log.warning(
                    "split %r of %s has %d samples, fewer than world_size x num_workers = "
                    "%d x %d = %d global workers: %d workers get no sample of it",
                    ds.split_part,
                    ds.root,
                    len(ds),
                    wc.world_size,
                    wc.workers_per_rank,
                    workers,
                    workers - len(ds),
                )
        total_slices = 0
        for slots in self._chain_slots(wc):
            for slot in slots:
                for reader in self.readers(slot):
                    total_slices += reader.worker_slice_count()
        if total_slices == 0:
            sizes = [len(ds) for ds in self.datasets]
            if sum(sizes) == 0:
                raise ConfigError(
                    "the split is empty (0 samples): "
                    + ", ".join(f"split {d.split_part!r} of {d.root}" for d in self.datasets)
                    + "; prepare gave it no shard (see its warning): prepare again with "
                    "--split-parts or with more shards"
                )
            raise ConfigError(
                f"rank {wc.rank} has no data: the split has {sum(sizes)} samples, fewer than "
                f"{self._global_workers(wc)} global workers, and none of them is this "
                "rank's; use fewer ranks or workers"
            )

    def _global_workers(self, wc: WorkerConfig) -> str:
        layout = self.canonical(wc.slot(0))
        if layout is None:
            return (
                f"world_size x num_workers = {wc.world_size} x {wc.workers_per_rank} = "
                f"{wc.world_size * wc.workers_per_rank}"
            )
        return (
            f"the canonical_layout's {layout.ranks} x {layout.workers} = "
            f"{layout.ranks * layout.workers} logical pipelines as"
        )

    def _chain_slots(self, wc: WorkerConfig, epoch: int = 0) -> list[list[WorkerSlot]]:
        """Per loader worker of ``wc``'s rank, the slots of the chains it runs: its own, or
        under a canonical layout its logical pipelines (phase by phase)."""
        out = []
        for worker in range(wc.workers_per_rank):
            slot = wc.slot(worker, epoch)
            layout = self.canonical(slot)
            out.append([slot] if layout is None else layout.slots(slot))
        return out

    def samples_per_epoch(self, wc: WorkerConfig, epoch: int = 0) -> list[int]:
        """Samples each worker of this rank reads in ``epoch`` (before blending)."""
        return [
            sum(lengths.read_samples(r, epoch) for r in self.readers(wc.slot(worker, epoch)))
            for worker in range(wc.workers_per_rank)
        ]

    def counted_samples(self, wc: WorkerConfig, epoch: int = 0) -> list[int]:
        """Samples each worker of ``wc``'s rank counts towards ``len()`` in ``epoch``
        (:mod:`energon_lite.pipeline.lengths` says how a blend counts)."""

        return [
            self._counted(self.readers(wc.slot(w, epoch)), epoch)
            for w in range(wc.workers_per_rank)
        ]

    def _counted(self, readers: list[Reader], epoch: int) -> int:
        if self.blend_mode == "epochized":
            return sum(
                lengths.epochized_samples(
                    r, leaf.repetitions or 0, epoch, self.options.epochized_rounding
                )
                for r, leaf in zip(readers, self.leaves)
            )
        if self.blend_mode == "weights" and len(readers) > 1:
            return sum(lengths.dealt_samples(r) for r in readers)
        return sum(lengths.read_samples(r, epoch) for r in readers)

    def items_per_worker(self, wc: WorkerConfig, epoch: int = 0) -> list[int]:
        """Items each worker of this rank yields per epoch: exact for an unbatched dataset
        without limit or quotas (its samples), else the rank's batches dealt round robin."""
        opts = self.options
        if opts.batch_size is None and opts.limit is None and self.blend_mode != "epochized":
            return self.samples_per_epoch(wc, epoch)
        total = self.batches_per_epoch(wc, epoch)
        return [share(total, wc.workers_per_rank, w) for w in range(wc.workers_per_rank)]

    def batches_per_epoch(self, wc: WorkerConfig, epoch: int = 0) -> int:
        """Batches this rank counts per epoch, by Energon's rules (:mod:`energon_lite.pipeline.lengths`)."""
        opts = self.options
        layout = self.canonical(wc.slot(0))
        if layout is not None:  # a step of a phase lasts while any of its pipelines has batches
            per_phase = layout.ranks // wc.world_size
            size = None if opts.batch_size is None else opts.batch_size // per_phase
            batches = 0
            for slots in self._chain_slots(wc, epoch):
                counts = [self._counted(self.readers(slot), epoch) for slot in slots]
                made = lengths.batches_per_worker(counts, size, opts.batch_drop_last)
                batches += sum(max(made[i : i + per_phase]) for i in range(0, len(made), per_phase))
            return batches if opts.limit is None else min(batches, opts.limit)
        per_worker = self.counted_samples(wc, epoch)
        batches = sum(lengths.batches_per_worker(per_worker, opts.batch_size, opts.batch_drop_last))
        if self.options.limit is not None:
            batches = min(batches, self.options.limit)
        return batches
