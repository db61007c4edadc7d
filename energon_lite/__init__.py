"""energon_lite: an exactly resumable, lean multimodal data loader shaped after Megatron-Energon."""

from typing import Any

from energon_lite.cache import (
    CachePool,
    DecodeFileStore,
    DirectLazy,
    FileCacheLazy,
    FileStore,
    FileStoreCachePool,
    Lazy,
    MockLazy,
    NoCachePool,
    PrimaryFileStore,
    SystemFileStore,
)
from energon_lite.collate import batch_list, batch_pad_stack, batch_stack
from energon_lite.crude import CrudeSample, CrudeWebdataset, cooker
from energon_lite.decode import SampleDecoder
from energon_lite.errors import (
    ConfigError,
    DatasetFormatError,
    EnergonLiteError,
    MediaDecodeError,
    SkipSample,
    StateError,
    TooManyFailuresError,
)
from energon_lite.loader import (
    SavableDataset,
    SavableLoader,
    get_loader,
    get_savable_loader,
    get_train_dataset,
    get_val_dataset,
)
from energon_lite.prepare import prepare_dataset
from energon_lite.samples import (
    Batch,
    CaptioningSample,
    ImageClassificationSample,
    ImageSample,
    InterleavedSample,
    Sample,
    SourceInfo,
    TextSample,
    VidQASample,
    VQASample,
    basic_sample_keys,
    edataclass,
)
from energon_lite.task_encoder import Cooker, DefaultTaskEncoder, TaskEncoder, stateless
from energon_lite.worker import WorkerConfig

__version__ = "0.1.0"

__all__ = [
    "Batch",
    "CachePool",
    "CrudeJsonlDatasetFactory",
    "CrudeSample",
    "CrudeWebdataset",
    "DecodeFileStore",
    "DefaultCrudeJsonlDatasetFactory",
    "DirectLazy",
    "FileCacheLazy",
    "FileStore",
    "FileStoreCachePool",
    "Lazy",
    "MockLazy",
    "NoCachePool",
    "PrimaryFileStore",
    "SystemFileStore",
    "SourceInfo",
    "cooker",
    "edataclass",
    "CaptioningSample",
    "ConfigError",
    "Cooker",
    "DatasetFormatError",
    "DefaultTaskEncoder",
    "EnergonLiteError",
    "ImageClassificationSample",
    "ImageSample",
    "InterleavedSample",
    "MediaDecodeError",
    "Sample",
    "SampleDecoder",
    "SavableDataset",
    "SavableLoader",
    "SkipSample",
    "StateError",
    "TaskEncoder",
    "TextSample",
    "TooManyFailuresError",
    "VQASample",
    "VidQASample",
    "WorkerConfig",
    "basic_sample_keys",
    "batch_list",
    "batch_pad_stack",
    "batch_stack",
    "get_loader",
    "get_savable_loader",
    "get_train_dataset",
    "get_val_dataset",
    "prepare_dataset",
    "stateless",
]


# Energon's JSONL factory names live in the JSONL flavor; they are looked up on first use so
# that importing the core does not import a flavor (flavors plug in through energon_lite.kinds).
_LAZY = {
    "CrudeJsonlDatasetFactory": "energon_lite.flavors.jsonl",
    "DefaultCrudeJsonlDatasetFactory": "energon_lite.flavors.jsonl",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'energon_lite' has no attribute {name!r}")
