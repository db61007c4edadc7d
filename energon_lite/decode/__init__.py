"""Decoding of sample parts (images, text, json, npy, video/audio ...) by extension."""

from energon_lite.decode.decoder import ALLOW_PICKLE_ENV, SampleDecoder
from energon_lite.decode.normalize import normalize_batch
from energon_lite.decode.sniff import guess_extension

__all__ = ["ALLOW_PICKLE_ENV", "SampleDecoder", "guess_extension", "normalize_batch"]
