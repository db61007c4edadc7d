"""energon_lite: an exactly resumable, lean multimodal data loader shaped after Megatron-Energon."""

from energon_lite.collate import batch_list, batch_pad_stack, batch_stack
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
    TextSample,
    VidQASample,
    VQASample,
    basic_sample_keys,
)
from energon_lite.task_encoder import Cooker, DefaultTaskEncoder, TaskEncoder, stateless
from energon_lite.worker import WorkerConfig

__version__ = "0.1.0"

__all__ = [
    "Batch",
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
