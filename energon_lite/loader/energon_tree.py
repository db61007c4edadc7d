"""Energon's tree of wrapper datasets, as a read-only view of a dataset's pipeline.

Energon builds a loader's dataset as nested wrapper objects (``MapDataset(BatchDataset(
MapDataset(BlendDataset((RepeatDataset(MapDataset(WebdatasetSampleLoaderDataset)), w),
...))))``); code and tests walk that tree through ``.dataset``, read a blend's
``dataset_weights`` and a leaf's ``workers_slice_offsets``, and compare ``config()`` trees.
energon_lite runs one chain of stages per worker instead; :func:`energon_tree` describes that
chain as the tree Energon builds for the same arguments (its ``build_train_datasets`` /
``build_val_datasets``): a fold over the chain's plan (``DatasetPipeline.plan(slot)``, the one
description of the chain; each node's class and settings say which of Energon's wrappers it
stands for), without building a chain or reading a sample:

* ``dataset.dataset`` is the node below the dataset's own (the dataset stands for the
  outermost node); a blend node counts as a ``BlendDataset`` (``isinstance``; registered by
  :mod:`energon_lite.wrappers.blending`) and has ``dataset_weights``;
* a leaf's ``WebdatasetSampleLoaderDataset`` node has ``workers_slice_offsets``: per worker
  of this rank, the sample numbers that bound its slices (``[start, ..., end]``; ``[start]``
  for a worker without samples), and ``len()``: the rank's samples of the leaf;
* ``config()`` is Energon's ``config()`` of that tree (what ``loader.config()`` returns).
  Functions are named ``module.qualname`` as Energon names them; energon_lite's own by the
  Energon module path they mirror (``energon_lite.task_encoder.base.DefaultTaskEncoder.batch``
  as ``megatron.energon.task_encoder.base.DefaultTaskEncoder.batch``), and the two steps
  Energon makes of functions of its own (loading a raw sample, a ``field_map`` loader) by
  Energon's names, so that the tree of the same pipeline compares equal with one Energon
  wrote. energon_lite's own description of a dataset (what a saved state must match) stays
  ``dataset.config()``.

A dataset that is not a plain pipeline (a wrapper composition, robot episodes) describes
itself (``energon_view``) or is one node with its ``config()``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from energon_lite.stages.batch import Batch
from energon_lite.stages.blend_epochized import EpochizedBlend
from energon_lite.stages.blend_weighted import WeightedBlend
from energon_lite.stages.concat import Concat
from energon_lite.stages.encode import Encode
from energon_lite.stages.group_batch import GroupBatch
from energon_lite.stages.limit import Limit
from energon_lite.stages.pack import Pack
from energon_lite.stages.phases import Phases
from energon_lite.stages.plan import Node
from energon_lite.stages.reader import Reader
from energon_lite.stages.shuffle import ShuffleBuffer
from energon_lite.task_encoder.base import TaskEncoder, get_stateless
from energon_lite.worker import WorkerConfig

if TYPE_CHECKING:
    from energon_lite.pipeline.dataset_pipeline import DatasetPipeline

ENERGON = "megatron.energon"
# Energon's names of two steps it makes of functions of its own
LOAD_SAMPLE_RAW = (
    f"{ENERGON}.flavors.webdataset.base_webdataset.BaseWebdatasetFactory._load_sample_raw"
)
FIELD_MAP_LOADER = (
    f"{ENERGON}.flavors.webdataset.default_generic_webdataset."
    "DefaultGenericWebdatasetFactory.__init__.<locals>.<lambda>"
)


def function_name(fn: Any) -> str:
    """A function as Energon's ``config()`` names it (``module.qualname``); energon_lite's own
    by the Energon module path it mirrors."""
    module = inspect.getmodule(fn)
    name = module.__name__ if module is not None else getattr(fn, "__module__", "<unknown>")
    if name == "energon_lite" or name.startswith("energon_lite."):
        name = ENERGON + name[len("energon_lite") :]
    return f"{name}.{getattr(fn, '__qualname__', getattr(fn, '__name__', '<unknown>'))}"


class TreeNode:
    """One node of the tree: Energon's class name, its ``config()`` fields and the node(s)
    below it."""

    def __init__(self, kind: str, fields: dict[str, Any], dataset: TreeNode | None = None):
        self.kind = kind
        self.fields = fields
        if dataset is not None:
            self.dataset = dataset

    def config(self) -> dict[str, Any]:
        """Energon's ``config()`` of this node and everything below it."""
        out: dict[str, Any] = {"type": self.kind}
        if hasattr(self, "dataset"):
            out["dataset"] = self.dataset.config()
        out.update({key: _plain(value) for key, value in self.fields.items()})
        return out

    def __repr__(self) -> str:
        return f"{self.kind}(view)"


class BlendNode(TreeNode):
    """Energon's ``BlendDataset``: ``dataset_weights`` is ``[(node, weight), ...]``."""

    def __init__(self, dataset_weights: list[tuple[TreeNode, float]], worker_config: WorkerConfig):
        super().__init__(
            "BlendDataset",
            {"dataset_weights": dataset_weights, "worker_config": worker_config.config()},
        )
        self.dataset_weights = dataset_weights
        self.datasets = [node for node, _ in dataset_weights]
        self.weights = tuple(weight for _, weight in dataset_weights)


class SampleLoaderNode(TreeNode):
    """Energon's ``WebdatasetSampleLoaderDataset`` of one leaf."""

    def __init__(self, workers_slice_offsets: list[list[int]], fields: dict[str, Any]):
        length = sum(offsets[-1] - offsets[0] for offsets in workers_slice_offsets)
        super().__init__(
            "WebdatasetSampleLoaderDataset",
            {"joins": 1, "len": length, "slice_offsets": workers_slice_offsets, **fields},
        )
        self.workers_slice_offsets = workers_slice_offsets
        self._len = length

    def __len__(self) -> int:
        return self._len


def _plain(value: Any) -> Any:
    if isinstance(value, TreeNode):
        return value.config()
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _overridden(te: TaskEncoder, hook: str) -> Callable[..., Any] | None:
    """The bound hook when ``te``'s class overrides TaskEncoder's (Energon's rule for adding a
    wrapper), else None."""
    own = getattr(type(te), hook, None)
    return getattr(te, hook) if own is not None and own is not getattr(TaskEncoder, hook) else None


def energon_tree(
    pipeline: DatasetPipeline, wc: WorkerConfig, virtual_epoch_length: int | None
) -> TreeNode:
    """The tree Energon builds for ``pipeline``'s arguments (see the module): a fold over the
    chain's plan (``pipeline.plan``), each node standing for the wrappers Energon makes of
    that step."""
    node = _Fold(pipeline, wc).view(pipeline.plan(wc.slot(0)))
    if virtual_epoch_length:
        fields = {"length": virtual_epoch_length, "worker_config": wc.config()}
        node = TreeNode("EpochizeDataset", fields, node)
    return node


class _Fold:
    """One plan node -> Energon's wrapper nodes for it, over the view of its parents."""

    def __init__(self, pipeline: DatasetPipeline, wc: WorkerConfig) -> None:
        self.pipeline, self.wc, self.wcc = pipeline, wc, wc.config()
        self.te = pipeline.task_encoder

    def view(
        self, node: Node, in_blend: bool = False, joined: dict[str, Any] | None = None
    ) -> TreeNode:
        """``node``'s view; ``in_blend``: a blend's source (the blend repeats it);
        ``joined``: the settings of the batch a canonical layout's ``Phases`` joins."""
        cls, settings, wcc = node.cls, node.settings, self.wcc
        if cls is Reader:
            leaf = _leaf(self.pipeline, settings["leaf"], self.wc)
            if settings["repeat"] and not in_blend:  # one dataset, repeated
                return TreeNode("RepeatDataset", {"repeats": None, "worker_config": wcc}, leaf)
            return leaf
        if cls is WeightedBlend:
            return self._blend([(self._repeated(p), _weight(w)) for p, w in
                                zip(node.parents, settings["weights"])])  # fmt: skip
        if cls is EpochizedBlend:
            return self._epochized(node)
        if cls is Concat:
            return TreeNode(
                "ConcatDataset", {"datasets": [self.view(p, True) for p in node.parents]}
            )
        if cls is Phases:  # the logical pipelines are alike: the first stands for all
            return self.view(node.parents[0], joined=settings)
        below = self.view(node.parents[0], in_blend, joined)
        if cls is ShuffleBuffer:
            if settings["size"] <= 1:  # Energon makes no buffer of one
                return below
            fields = {"size": settings["size"], "worker_config": wcc}
            return TreeNode("ShuffleBufferDataset", fields, below)
        if cls is Encode:
            return self._encoded(settings, below)
        if cls is Pack:
            te = self.te
            fields = {
                "buffer_size": settings["size"],
                "pre_packer": function_name(te.select_samples_to_pack),
                "final_packer": function_name(te.pack_selected_samples),
                "final_packer_stateless": get_stateless(te.pack_selected_samples),
                "worker_config": wcc,
            }
            return TreeNode("PackingDataset", fields, below)
        if cls is GroupBatch:
            fields = {
                "bucket": function_name(settings["criterion"]),
                "batcher": function_name((joined or settings)["collate"]),
                "batcher_stateless": False,  # Energon's build_batch does not pass it here
                "drop_last": settings["drop_last"],
                "worker_config": wcc,
            }
            return self._batch_encoded(TreeNode("GroupBatchDataset", fields, below))
        if cls is Batch:
            collate = (joined or settings)["collate"]
            fields = {
                "batch_size": (joined or settings)["batch_size"],
                "batcher": function_name(collate),
                "batcher_stateless": get_stateless(collate),
                "drop_last": settings["drop_last"],
                "worker_config": wcc,
            }
            return self._batch_encoded(TreeNode("BatchDataset", fields, below))
        if cls is Limit and settings["length"]:  # (Energon makes none for 0)
            fields = {"length": settings["length"], "reset_after_epoch": True, "worker_config": wcc}
            return TreeNode("LimitDataset", fields, below)
        # a step Energon makes no wrapper of (Cost), or one described with another (Map:
        # encode_batch, with the batching)
        return below

    def _batch_encoded(self, batched: TreeNode) -> TreeNode:
        """Energon maps ``encode_batch`` over the batches wherever the task encoder's class
        overrides it (a ``DefaultTaskEncoder`` without ``batch_type`` too, where the plan
        has no ``Map``: it would change nothing)."""
        encode_batch = _overridden(self.te, "encode_batch")
        return batched if encode_batch is None else _map(encode_batch, batched)

    def _repeated(self, node: Node) -> TreeNode:
        """A blend's source, repeated forever (Energon's blend repeats each source)."""
        fields = {"repeats": None, "worker_config": self.wcc}
        return TreeNode("RepeatDataset", fields, self.view(node, True))

    def _blend(self, pairs: list[tuple[TreeNode, float]]) -> TreeNode:
        return pairs[0][0] if len(pairs) == 1 else BlendNode(pairs, self.wc)

    def _epochized(self, node: Node) -> TreeNode:
        """``blend_epochized``: each source repeated ``repetitions`` times, weighted by its
        samples, the blend repeated when the dataset repeats."""
        pairs = []
        for parent, reps in zip(node.parents, node.settings["repetitions"]):
            reps = 1.0 if reps is None else reps
            view = self.view(parent, True)
            if reps != 1:
                view = TreeNode("RepeatDataset", {"repeats": reps, "worker_config": self.wcc}, view)
            leaf = next(n for n in parent.nodes() if n.cls is Reader).settings["leaf"]
            pairs.append((view, len(self.pipeline.datasets[leaf]) * reps))
        top = self._blend(pairs)
        if node.settings["repeat"]:
            top = TreeNode("RepeatDataset", {"repeats": None, "worker_config": self.wcc}, top)
        return top

    def _encoded(self, settings: dict[str, Any], below: TreeNode) -> TreeNode:
        """The per-sample hook as a map; without packing, Energon maps ``postencode_sample``
        after it too."""
        encode = _overridden(self.te, settings["hook"])
        if encode is not None:
            below = _map(encode, below)
        post = None if settings["packing"] else _overridden(self.te, "postencode_sample")
        return below if post is None else _map(post, below)


def _weight(weight: Any) -> float:
    """A blend source's weight in Energon's tree (a schedule's: 1)."""
    return float(weight) if isinstance(weight, (int, float)) else 1.0


def _map(fn: Callable[..., Any], node: TreeNode) -> TreeNode:
    return TreeNode(
        "MapDataset", {"map_fn": function_name(fn), "map_fn_stateless": get_stateless(fn)}, node
    )


def _leaf(pipeline: DatasetPipeline, index: int, wc: WorkerConfig) -> TreeNode:
    """Energon's built leaf: ``MapDataset(WebdatasetSampleLoaderDataset)``, the map carrying
    the dataset factory's ``config()``."""
    opts = pipeline.options
    readers = [pipeline.readers(wc.slot(w))[index] for w in range(wc.workers_per_rank)]
    offsets = [r.table().worker_offsets(r.worker_index) for r in readers]
    reader = readers[0]
    shuffle = reader.multiplier if opts.training else None
    loader = SampleLoaderNode(
        offsets,
        {
            "worker_config": wc.config(),
            "shuffle_over_epochs": shuffle,
            "parallel_slice_iters": reader.open_slices,
        },
    )
    fields = {
        "map_fn": LOAD_SAMPLE_RAW,
        "map_fn_config": _factory_config(pipeline, index, shuffle, reader.open_slices),
        "map_fn_stateless": True,
    }
    return TreeNode("MapDataset", fields, loader)


def _factory_config(
    pipeline: DatasetPipeline, index: int, shuffle: int | None, parallel: int
) -> dict[str, Any]:
    """Energon's dataset factory ``config()`` of leaf ``index``."""
    opts, ds, spec = pipeline.options, pipeline.datasets[index], pipeline.specs[index]
    leaf = pipeline.leaves[index]
    factory = spec.factory
    root = ds.root
    kind = "CrudeWebdataset" if factory.crude else "StandardWebdatasetFactory"
    loader = FIELD_MAP_LOADER if factory.loader is None else function_name(factory.loader)
    decoder = pipeline.task_encoder.decoder
    return {
        "type": kind,
        "training": opts.training,
        "_path": str(root),
        "shards": [
            {"name": name, "count": count, "_path": str(root / name)} for name, count in _shards(ds)
        ],
        "sample_excludes": [],
        "shuffle_over_epochs": shuffle if opts.training else 1,  # Energon's factory default
        "parallel_shard_iters": opts.parallel_shard_iters,
        "max_samples_per_sequence": opts.max_samples_per_sequence,
        "subset": None if leaf.subset is None else {"range": list(leaf.subset)},
        "subflavors": dict(spec.subflavors or {}),
        "sample_loader": loader,
        **(decoder.config() if decoder is not None else {}),
    }


def _shards(ds: Any) -> Sequence[tuple[str, int]]:
    """The split's shards, in order, with their sample counts (none for a source without)."""
    shards = getattr(ds, "split_shards", None)
    return shards() if callable(shards) else []
