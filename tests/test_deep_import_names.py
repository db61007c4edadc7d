"""Every deep Energon module path that real code imports resolves under ``energon_lite``
with the import change ``megatron.energon.X`` -> ``energon_lite.X``, and each name we
provide there exists at the same path in megatron-energon (the oracle): no name of ours
pretends to be Energon's where Energon has none, and none of the listed ones is missing."""

from __future__ import annotations

import importlib
from typing import TypeVar

import pytest
from conftest import oracle

energon = oracle()

WRAPPERS = {
    "batch_dataset": ["BatchDataset"],
    "blend_dataset": ["BlendDataset"],
    "concat_dataset": ["ConcatDataset"],
    "epochize_dataset": ["EpochizeDataset"],
    "filter_dataset": ["FilterDataset"],
    "gc_dataset": ["GcDataset"],
    "group_batch_dataset": ["GroupBatchDataset"],
    "iter_map_dataset": ["IterMapDataset"],
    "limit_dataset": ["LimitDataset"],
    "log_sample_dataset": ["LogSampleDataset"],
    "map_dataset": ["MapDataset"],
    "mix_batch_dataset": ["MixBatchDataset"],
    "packing_dataset": ["PackingDataset"],
    "repeat_dataset": ["RepeatDataset"],
    "shuffle_buffer_dataset": ["ShuffleBufferDataset"],
    "watchdog_dataset": ["WatchdogDataset"],
}

# module path under megatron.energon / energon_lite -> the names real code imports from it
DEEP_NAMES: dict[str, list[str]] = {
    # the deep imports of real projects
    "epathlib": ["EPath", "DEFAULT_PROFILE_NAME"],
    "epathlib.epath": ["EPath", "NVDATASET_CACHE_DIR"],
    "dataset_config": ["MAIN_FOLDER_NAME", "load_config", "get_dataset_from_config"],
    "task_encoder.base": ["stateless", "Batch", "TaskEncoder", "DefaultTaskEncoder"],
    "flavors.base_dataset": ["Sample", "SavableDataset", "BaseCoreDatasetFactory"],
    "flavors.webdataset": [
        "BaseWebdatasetFactory",
        "DefaultDecoderWebdatasetFactory",
        "DefaultGenericWebdatasetFactory",
        "EmptyDatasetError",
        "ImageDecoderType",
        "JoinedWebdatasetFactory",
        "SampleDecoder",
        "StandardWebdatasetFactory",
        "WebdatasetMeta",
    ],
    "flavors.webdataset.config": ["MAIN_FOLDER_NAME"],
    "flavors.webdataset.sample_decoder": ["SampleDecoder"],
    "worker": ["WorkerConfig"],
    "metadataset.loader_interface": ["DatasetBlendMode"],
    "transforms": ["MergeTransform", "CustomTransform"],
    # Energon's other module paths provided at the mirrored path
    "transforms.merge": ["MergeTransform"],
    "transforms.custom": ["CustomTransform"],
    "media": [
        "AVMetadata",
        "ImageMetadata",
        "MediaMetadataBase",
        "MediaMetadataType",
        "deserialize_media_metadata",
        "serialize_media_metadata",
    ],
    "media.metadata": ["AVMetadata", "ImageMetadata", "MediaMetadataType"],
    "media.extractor": ["MediaFilterConfig", "MediaFilterStrategy"],
    "media.filesystem_prepare": ["prepare_filesystem_dataset"],
    "av.av_reader": ["AVProbeIndex", "AVProbeIndexEntry"],
    "flavors.webdataset.aggregator_pool": ["AggregatorPool", "BaseAggregator"],
    "fork_hook": [
        "DataclassForkMixin",
        "ForkMixin",
        "WeakCallbacks",
        "after_in_child_fork_hook",
        "after_in_parent_fork_hook",
        "before_fork_hook",
    ],
    "sample_utils": [
        "default_get_batch_keys",
        "format_sample_compact",
        "format_sample_detailed",
    ],
    **{f"wrappers.{module}": names for module, names in WRAPPERS.items()},
}

# Energon modules whose whole __all__ we provide
WHOLE_MODULES = ["media", "transforms", "media.metadata"]


@pytest.mark.parametrize("path", sorted(DEEP_NAMES))
def test_deep_names_resolve_in_both(path: str) -> None:
    if path.startswith("transforms"):
        pytest.importorskip("torchvision")  # Energon's transforms import it
    ours = importlib.import_module(f"energon_lite.{path}")
    theirs = importlib.import_module(f"megatron.energon.{path}")
    missing_here = [n for n in DEEP_NAMES[path] if not hasattr(ours, n)]
    missing_there = [n for n in DEEP_NAMES[path] if not hasattr(theirs, n)]
    assert (missing_here, missing_there) == ([], [])


@pytest.mark.parametrize("path", WHOLE_MODULES)
def test_whole_modules_have_energons_names(path: str) -> None:
    if path == "transforms":
        pytest.importorskip("torchvision")
    theirs = importlib.import_module(f"megatron.energon.{path}")
    names = getattr(theirs, "__all__", None) or [  # what the module defines
        n
        for n, v in vars(theirs).items()
        if not n.startswith("_")
        and getattr(v, "__module__", None) == theirs.__name__
        and not isinstance(v, TypeVar)
    ]
    ours = importlib.import_module(f"energon_lite.{path}")
    assert [n for n in names if not hasattr(ours, n)] == []
