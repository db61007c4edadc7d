"""Energon's tree of wrapper datasets, as a read-only view of a dataset's pipeline.

Energon builds a loader's dataset as nested wrapper objects (``MapDataset(BatchDataset(
MapDataset(BlendDataset((RepeatDataset(MapDataset(WebdatasetSampleLoaderDataset)), w),
...))))``); code and tests walk that tree through ``.dataset``, read a blend's
``dataset_weights`` and a leaf's ``workers_slice_offsets``, and compare ``config()`` trees.
energon_lite runs one chain of stages per worker instead; :func:`energon_tree` describes that
chain as the tree Energon builds for the same arguments (its ``build_train_datasets`` /
``build_val_datasets``), computed from the pipeline without building a chain or reading a
sample:

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
    """The tree Energon builds for ``pipeline``'s arguments (see the module)."""
    opts, te = pipeline.options, pipeline.task_encoder
    leaves = [_leaf(pipeline, i, wc) for i in range(len(pipeline.leaves))]
    node: TreeNode
    if not opts.training:
        node = leaves[0] if len(leaves) == 1 else TreeNode("ConcatDataset", {"datasets": leaves})
    else:
        node = _train_blend(pipeline, leaves, wc)
        if opts.shuffle_buffer_size is not None and opts.shuffle_buffer_size > 1:
            fields = {"size": opts.shuffle_buffer_size, "worker_config": wc.config()}
            node = TreeNode("ShuffleBufferDataset", fields, node)
    encode = _overridden(te, "preencode_sample") if opts.packing_buffer_size else None
    encode = encode or _overridden(te, "encode_sample")
    if encode is not None:
        node = _map(encode, node)
    node = _batching(pipeline, node, wc)
    if virtual_epoch_length:
        fields = {"length": virtual_epoch_length, "worker_config": wc.config()}
        node = TreeNode("EpochizeDataset", fields, node)
    if not opts.training and opts.limit:
        fields = {"length": opts.limit, "reset_after_epoch": True, "worker_config": wc.config()}
        node = TreeNode("LimitDataset", fields, node)
    return node


def _map(fn: Callable[..., Any], node: TreeNode) -> TreeNode:
    return TreeNode(
        "MapDataset", {"map_fn": function_name(fn), "map_fn_stateless": get_stateless(fn)}, node
    )


def _train_blend(pipeline: DatasetPipeline, leaves: list[TreeNode], wc: WorkerConfig) -> TreeNode:
    """Energon's blend of the leaves: each repeated (``blend``) or repeated ``repetitions``
    times (``blend_epochized``), in a ``BlendDataset`` when there are several."""
    opts, wcc = pipeline.options, wc.config()
    repeat = opts.repeat
    pairs: list[tuple[TreeNode, float]] = []
    for node, leaf, ds in zip(leaves, pipeline.leaves, pipeline.datasets):
        if pipeline.blend_mode == "epochized":
            reps = 1.0 if leaf.repetitions is None else leaf.repetitions
            if reps != 1:
                node = TreeNode("RepeatDataset", {"repeats": reps, "worker_config": wcc}, node)
            pairs.append((node, len(ds) * reps))
        elif repeat or len(leaves) > 1:
            node = TreeNode("RepeatDataset", {"repeats": None, "worker_config": wcc}, node)
            weight = leaf.weight if isinstance(leaf.weight, (int, float)) else 1.0
            pairs.append((node, float(weight)))
        else:
            pairs.append((node, 1.0))
    if pipeline.blend_mode != "epochized":
        repeat = False  # the leaves repeat themselves
    top = pairs[0][0] if len(pairs) == 1 else BlendNode(pairs, wc)
    if repeat:
        top = TreeNode("RepeatDataset", {"repeats": None, "worker_config": wcc}, top)
    return top


def _batching(pipeline: DatasetPipeline, node: TreeNode, wc: WorkerConfig) -> TreeNode:
    """Energon's ``build_batch``: packing, then grouped or plain batching, then
    ``encode_batch``."""
    opts, te, wcc = pipeline.options, pipeline.task_encoder, wc.config()
    if opts.packing_buffer_size is not None:
        fields = {
            "buffer_size": opts.packing_buffer_size,
            "pre_packer": function_name(te.select_samples_to_pack),
            "final_packer": function_name(te.pack_selected_samples),
            "final_packer_stateless": get_stateless(te.pack_selected_samples),
            "worker_config": wcc,
        }
        node = TreeNode("PackingDataset", fields, node)
    elif (post := _overridden(te, "postencode_sample")) is not None:
        node = _map(post, node)
    grouped = _overridden(te, "batch_group_criterion")
    if grouped is not None:
        fields = {
            "bucket": function_name(grouped),
            "batcher": function_name(te.batch),
            "batcher_stateless": False,  # Energon's build_batch does not pass it here
            "drop_last": opts.batch_drop_last,
            "worker_config": wcc,
        }
        node = TreeNode("GroupBatchDataset", fields, node)
    elif opts.batch_size is not None:
        fields = {
            "batch_size": opts.batch_size,
            "batcher": function_name(te.batch),
            "batcher_stateless": get_stateless(te.batch),
            "drop_last": opts.batch_drop_last,
            "worker_config": wcc,
        }
        node = TreeNode("BatchDataset", fields, node)
    if grouped is not None or opts.batch_size is not None:
        encode_batch = _overridden(te, "encode_batch")
        if encode_batch is not None:
            node = _map(encode_batch, node)
    return node


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
    decoder = getattr(pipeline.task_encoder, "decoder", None)
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
