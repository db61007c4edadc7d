"""Decoding of sample parts (images, text, json, npy, video/audio ...) by extension."""

from energon_lite.decode.decoder import SampleDecoder

__all__ = ["SampleDecoder"]
