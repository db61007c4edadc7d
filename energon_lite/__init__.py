"""energon_lite: an exactly resumable, lean multimodal data loader shaped after Megatron-Energon."""

from energon_lite.augment import AugmentTaskEncoder
from energon_lite.collate import batch_list, batch_pad_stack, batch_stack
from energon_lite.decode import SampleDecoder
from energon_lite.edataclass import edataclass
from energon_lite.error_handlers import log_exception, reraise_exception
from energon_lite.errors import (
    ConfigError,
    DatasetFormatError,
    EnergonLiteError,
    MediaDecodeError,
    SkipSample,
    StateError,
    TooManyFailuresError,
)
from energon_lite.generic_collate import (
    concat_pad,
    generic_batch,
    generic_concat,
    homogeneous_concat_mix,
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
from energon_lite.savable_dataloader import SavableDataLoader
from energon_lite.task_encoder import Cooker, DefaultTaskEncoder, TaskEncoder, stateless
from energon_lite.worker import WorkerConfig

__version__ = "0.1.0"

__all__ = [
    "AugmentTaskEncoder",
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
    "MultiChoiceVQASample",
    "OCRSample",
    "Sample",
    "SampleDecoder",
    "SavableDataLoader",
    "SavableDataset",
    "SavableLoader",
    "SimilarityInterleavedSample",
    "SkipSample",
    "SourceInfo",
    "StateError",
    "TaskEncoder",
    "TextSample",
    "TooManyFailuresError",
    "VQAOCRSample",
    "VQASample",
    "VidQASample",
    "WorkerConfig",
    "basic_sample_keys",
    "batch_list",
    "batch_pad_stack",
    "batch_stack",
    "concat_pad",
    "edataclass",
    "generic_batch",
    "generic_concat",
    "get_loader",
    "get_savable_loader",
    "get_train_dataset",
    "get_val_dataset",
    "homogeneous_concat_mix",
    "log_exception",
    "prepare_dataset",
    "reraise_exception",
    "stateless",
]
