"""energon_lite: an exactly resumable, lean multimodal data loader shaped after Megatron-Energon."""

import importlib.abc
import sys
import types
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from typing import TYPE_CHECKING, Any

# Imported now, not on first use: the submodule of the same name would otherwise shadow it
# once anything imports energon_lite.edataclass (a light module: no torch).
from energon_lite.edataclass import edataclass

if TYPE_CHECKING:  # the names below, for type checkers; at run time see __getattr__
    from energon_lite.batching.collate import batch_list, batch_pad_stack, batch_stack
    from energon_lite.batching.generic import (
        concat_pad,
        generic_batch,
        generic_concat,
        homogeneous_concat_mix,
    )
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
    from energon_lite.cache.file_store_decoder import FileStoreDecoder
    from energon_lite.compat.arguments import (
        get_loader,
        get_savable_loader,
        get_train_dataset,
        get_val_dataset,
    )
    from energon_lite.compat.joined_factory import JoinedWebdatasetFactory
    from energon_lite.compat.metadataset_api import (
        DatasetLoader,
        DatasetLoaderInterface,
        Metadataset,
        MetadatasetV2,
        get_val_datasets,
        load_dataset,
        prepare_metadataset,
        traverse_metadataset,
    )
    from energon_lite.compat.savable_dataloader import SavableDataLoader
    from energon_lite.compat.webdataset_factories import (
        BaseCoreDatasetFactory,
        BaseWebdatasetFactory,
        CaptioningWebdataset,
        DefaultDecoderWebdatasetFactory,
        DefaultGenericWebdatasetFactory,
        ImageClassificationWebdataset,
        ImageWebdataset,
        InterleavedWebdataset,
        MultiChoiceVQAWebdataset,
        OCRWebdataset,
        SimilarityInterleavedWebdataset,
        StandardWebdatasetFactory,
        TextWebdataset,
        VidQAWebdataset,
        VQAOCRWebdataset,
        VQAWebdataset,
    )
    from energon_lite.decode import SampleDecoder, normalize_batch
    from energon_lite.errors import (
        ConfigError,
        DatasetFormatError,
        EnergonLiteError,
        MediaDecodeError,
        SkipSample,
        StateError,
        TooManyFailuresError,
        log_exception,
        reraise_exception,
    )
    from energon_lite.loader.api import SavableDataset, SavableLoader
    from energon_lite.metadataset.schedule import WeightSchedule
    from energon_lite.samples.crude import CrudeSample
    from energon_lite.samples.resolver import allow_sample_type_modules
    from energon_lite.samples.types import (
        Batch,
        CaptioningSample,
        ImageClassificationSample,
        ImageSample,
        InterleavedSample,
        MultiChoiceVQASample,
        OCRSample,
        Sample,
        SimilarityInterleavedSample,
        SourceInfo,
        TextSample,
        VidQASample,
        VQAOCRSample,
        VQASample,
        basic_sample_keys,
    )
    from energon_lite.shards.dataset import CrudeWebdataset
    from energon_lite.shards.prepare import prepare_dataset
    from energon_lite.task_encoder.augment import AugmentTaskEncoder
    from energon_lite.task_encoder.base import DefaultTaskEncoder, TaskEncoder, stateless
    from energon_lite.task_encoder.cooking import Cooker, cooker
    from energon_lite.worker import WorkerConfig
    from energon_lite.wrappers import (
        BatchDataset,
        BlendDataset,
        ConcatDataset,
        EpochizeDataset,
        FilterDataset,
        GcDataset,
        GroupBatchDataset,
        IterMapDataset,
        LimitDataset,
        LogSampleDataset,
        MapDataset,
        MixBatchDataset,
        PackingDataset,
        RepeatDataset,
        ShuffleBufferDataset,
    )

__version__ = "0.1.0"

__all__ = [
    "AugmentTaskEncoder",
    "BaseCoreDatasetFactory",
    "BaseWebdatasetFactory",
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
    "FileStoreDecoder",
    "Lazy",
    "MockLazy",
    "NoCachePool",
    "PrimaryFileStore",
    "SystemFileStore",
    "SourceInfo",
    "cooker",
    "edataclass",
    "normalize_batch",
    "CaptioningSample",
    "CaptioningWebdataset",
    "ConfigError",
    "Cooker",
    "DatasetFormatError",
    "DatasetLoader",
    "DatasetLoaderInterface",
    "DefaultDecoderWebdatasetFactory",
    "DefaultGenericWebdatasetFactory",
    "DefaultTaskEncoder",
    "EnergonLiteError",
    "ImageClassificationSample",
    "ImageClassificationWebdataset",
    "ImageSample",
    "ImageWebdataset",
    "InterleavedSample",
    "InterleavedWebdataset",
    "JoinedWebdatasetFactory",
    "MediaDecodeError",
    "Metadataset",
    "MetadatasetV2",
    "MultiChoiceVQASample",
    "MultiChoiceVQAWebdataset",
    "OCRSample",
    "OCRWebdataset",
    "Sample",
    "SampleDecoder",
    "SavableDataLoader",
    "SavableDataset",
    "SavableLoader",
    "SimilarityInterleavedSample",
    "SimilarityInterleavedWebdataset",
    "SkipSample",
    "StandardWebdatasetFactory",
    "StateError",
    "TaskEncoder",
    "TextSample",
    "TextWebdataset",
    "TooManyFailuresError",
    "VQAOCRSample",
    "VQAOCRWebdataset",
    "VQASample",
    "VQAWebdataset",
    "VidQASample",
    "VidQAWebdataset",
    "WeightSchedule",
    "WorkerConfig",
    "allow_sample_type_modules",
    "basic_sample_keys",
    "batch_list",
    "batch_pad_stack",
    "batch_stack",
    "concat_pad",
    "generic_batch",
    "generic_concat",
    "get_loader",
    "get_savable_loader",
    "get_train_dataset",
    "get_val_dataset",
    "get_val_datasets",
    "homogeneous_concat_mix",
    "load_dataset",
    "log_exception",
    "prepare_dataset",
    "prepare_metadataset",
    "reraise_exception",
    "stateless",
    "traverse_metadataset",
    # Energon's dataset wrapper classes (energon_lite/wrappers/)
    "BatchDataset",
    "BlendDataset",
    "ConcatDataset",
    "EpochizeDataset",
    "FilterDataset",
    "GcDataset",
    "GroupBatchDataset",
    "IterMapDataset",
    "LimitDataset",
    "LogSampleDataset",
    "MapDataset",
    "MixBatchDataset",
    "PackingDataset",
    "RepeatDataset",
    "ShuffleBufferDataset",
]


# Each public name and the module that defines it. Importing `energon_lite` imports none of
# them: a name is imported on first use (PEP 562), so that `energon-lite --help`, the
# errors module or a worker's small helpers do not pay for torch and the whole library.
_PUBLIC: dict[str, tuple[str, ...]] = {
    "energon_lite.batching.collate": (
        "batch_list",
        "batch_pad_stack",
        "batch_stack",
    ),
    "energon_lite.batching.generic": (
        "concat_pad",
        "generic_batch",
        "generic_concat",
        "homogeneous_concat_mix",
    ),
    "energon_lite.cache": (
        "CachePool",
        "DecodeFileStore",
        "DirectLazy",
        "FileCacheLazy",
        "FileStore",
        "FileStoreCachePool",
        "Lazy",
        "MockLazy",
        "NoCachePool",
        "PrimaryFileStore",
        "SystemFileStore",
    ),
    "energon_lite.cache.file_store_decoder": ("FileStoreDecoder",),
    "energon_lite.compat.arguments": (
        "get_loader",
        "get_savable_loader",
        "get_train_dataset",
        "get_val_dataset",
    ),
    "energon_lite.compat.joined_factory": ("JoinedWebdatasetFactory",),
    "energon_lite.compat.metadataset_api": (
        "DatasetLoader",
        "DatasetLoaderInterface",
        "Metadataset",
        "MetadatasetV2",
        "get_val_datasets",
        "load_dataset",
        "prepare_metadataset",
        "traverse_metadataset",
    ),
    "energon_lite.compat.savable_dataloader": ("SavableDataLoader",),
    "energon_lite.metadataset.schedule": ("WeightSchedule",),
    "energon_lite.compat.webdataset_factories": (
        "BaseCoreDatasetFactory",
        "BaseWebdatasetFactory",
        "CaptioningWebdataset",
        "DefaultDecoderWebdatasetFactory",
        "DefaultGenericWebdatasetFactory",
        "ImageClassificationWebdataset",
        "ImageWebdataset",
        "InterleavedWebdataset",
        "MultiChoiceVQAWebdataset",
        "OCRWebdataset",
        "SimilarityInterleavedWebdataset",
        "StandardWebdatasetFactory",
        "TextWebdataset",
        "VidQAWebdataset",
        "VQAOCRWebdataset",
        "VQAWebdataset",
    ),
    "energon_lite.decode": (
        "SampleDecoder",
        "normalize_batch",
    ),
    "energon_lite.errors": (
        "ConfigError",
        "DatasetFormatError",
        "EnergonLiteError",
        "MediaDecodeError",
        "SkipSample",
        "StateError",
        "TooManyFailuresError",
        "log_exception",
        "reraise_exception",
    ),
    "energon_lite.loader.api": (
        "SavableDataset",
        "SavableLoader",
    ),
    "energon_lite.samples.crude": ("CrudeSample",),
    "energon_lite.samples.resolver": ("allow_sample_type_modules",),
    "energon_lite.samples.types": (
        "Batch",
        "CaptioningSample",
        "ImageClassificationSample",
        "ImageSample",
        "InterleavedSample",
        "MultiChoiceVQASample",
        "OCRSample",
        "Sample",
        "SimilarityInterleavedSample",
        "SourceInfo",
        "TextSample",
        "VidQASample",
        "VQAOCRSample",
        "VQASample",
        "basic_sample_keys",
    ),
    "energon_lite.shards.dataset": ("CrudeWebdataset",),
    "energon_lite.shards.prepare": ("prepare_dataset",),
    "energon_lite.task_encoder.augment": ("AugmentTaskEncoder",),
    "energon_lite.task_encoder.base": (
        "DefaultTaskEncoder",
        "TaskEncoder",
        "stateless",
    ),
    "energon_lite.task_encoder.cooking": (
        "Cooker",
        "cooker",
    ),
    "energon_lite.worker": ("WorkerConfig",),
    "energon_lite.wrappers": (
        "BatchDataset",
        "BlendDataset",
        "ConcatDataset",
        "EpochizeDataset",
        "FilterDataset",
        "GcDataset",
        "GroupBatchDataset",
        "IterMapDataset",
        "LimitDataset",
        "LogSampleDataset",
        "MapDataset",
        "MixBatchDataset",
        "PackingDataset",
        "RepeatDataset",
        "ShuffleBufferDataset",
    ),
    # Energon's JSONL factory names live in the JSONL flavor
    "energon_lite.flavors.jsonl": ("CrudeJsonlDatasetFactory", "DefaultCrudeJsonlDatasetFactory"),
}
_LAZY = {name: module for module, names in _PUBLIC.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'energon_lite' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


# Modules that moved to another package after their path was documented. Importing the old
# path gives a module that forwards every name to the new one (the same objects), loaded
# only when the old path is imported; nothing below the public API imports upward for it.
_MOVED_MODULES = {
    # read_energon_state joined the rest of the Energon restore in resume/
    "energon_lite.state.energon_import": "energon_lite.resume.energon_import",
}


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds and loads the old paths of :data:`_MOVED_MODULES`."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in _MOVED_MODULES:
            return None
        return ModuleSpec(fullname, self)

    def create_module(self, spec: ModuleSpec) -> types.ModuleType:
        new_home = importlib.import_module(_MOVED_MODULES[spec.name])
        module = types.ModuleType(spec.name, new_home.__doc__)
        module.__getattr__ = lambda name: getattr(new_home, name)  # type: ignore[method-assign]
        module.__dir__ = lambda: dir(new_home)  # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModuleFinder())
