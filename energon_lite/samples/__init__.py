"""The data model: ``Sample``, ``Batch`` and the built-in sample types, crude samples, the
factory that builds typed samples from decoded parts, and which classes a dataset may name.

``energon_lite.samples`` keeps the sample types at this path (data files and user code
name them here); :mod:`energon_lite.samples.types` defines them.
"""

from energon_lite.samples.types import (
    SAMPLE_TYPES,
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
    sample_field_names,
)

__all__ = [
    "SAMPLE_TYPES",
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
    "VQAOCRSample",
    "VQASample",
    "VidQASample",
    "basic_sample_keys",
    "sample_field_names",
]
