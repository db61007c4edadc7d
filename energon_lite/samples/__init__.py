"""The data model: ``Sample``, ``Batch`` and the built-in sample types, crude samples, the
factory that builds typed samples from decoded parts, and which classes a dataset may name.

``energon_lite.samples`` keeps the sample types at this path (data files and user code
name them here); :mod:`energon_lite.samples.types` defines them. The built-in types and
``SAMPLE_TYPES`` are imported from there on first use, as there (each type is made when a
process first uses it).
"""

from typing import TYPE_CHECKING, Any

from energon_lite.samples import types as _types
from energon_lite.samples.types import (
    Batch,
    Sample,
    SourceInfo,
    basic_sample_keys,
    sample_field_names,
)

if TYPE_CHECKING:  # the names below, for type checkers; at run time see __getattr__
    from energon_lite.samples.types import (
        SAMPLE_TYPES,
        CaptioningSample,
        ImageClassificationSample,
        ImageSample,
        InterleavedSample,
        MultiChoiceVQASample,
        OCRSample,
        SimilarityInterleavedSample,
        TextSample,
        VidQASample,
        VQAOCRSample,
        VQASample,
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


def __getattr__(name: str) -> Any:
    if name != "SAMPLE_TYPES" and name not in _types.BUILTIN_MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_types, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
