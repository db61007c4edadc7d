"""Decoding of sample parts (images, text, json, npy, video/audio ...) by extension."""

from typing import TYPE_CHECKING, Any

from energon_lite.decode.decoder import ALLOW_PICKLE_ENV, SampleDecoder
from energon_lite.decode.sniff import guess_extension

if TYPE_CHECKING:  # at run time see __getattr__
    from energon_lite.decode.normalize import normalize_batch

__all__ = ["ALLOW_PICKLE_ENV", "SampleDecoder", "guess_extension", "normalize_batch"]


def __getattr__(name: str) -> Any:
    # used on the trainer's device: loaded on first use, not with every decoder a loader builds
    if name == "normalize_batch":
        from energon_lite.decode.normalize import normalize_batch

        return normalize_batch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
