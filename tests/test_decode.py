"""SampleDecoder: parts decoded by extension into the documented layouts."""

from __future__ import annotations

import io
import json

import msgpack
import numpy as np
import pytest
import torch
from PIL import Image

from energon_lite import SampleDecoder
from energon_lite.errors import ConfigError


def _png(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def test_image_modes_layouts_and_ranges() -> None:
    pixels = np.zeros((4, 6, 3), dtype=np.uint8)
    pixels[:, :, 0] = 255
    pixels[1, 2] = (10, 20, 30)
    data = _png(pixels)
    chw = SampleDecoder().decode_part("png", data)
    assert chw.shape == (3, 4, 6) and chw.dtype == torch.float32
    assert chw.max() == 1.0 and chw.min() == 0.0
    assert torch.allclose(chw[:, 1, 2], torch.tensor([10, 20, 30]) / 255)
    assert SampleDecoder(image_decode="torchuint8").decode_part("x.png", data)[
        :, 1, 2
    ].tolist() == [10, 20, 30]
    assert SampleDecoder(image_decode="rgb8").decode_part("png", data).shape == (4, 6, 3)
    assert SampleDecoder(image_decode="torchl").decode_part("png", data).shape == (1, 4, 6)
    assert isinstance(SampleDecoder(image_decode="pil").decode_part("png", data), Image.Image)
    with pytest.raises(ConfigError, match=r"unknown mode='rgb16' for image_decode; allowed: \["):
        SampleDecoder(image_decode="rgb16")
    with pytest.raises(ConfigError, match=r"unknown av_decode='ffmpeg'"):
        SampleDecoder(av_decode="ffmpeg")


def test_other_parts() -> None:
    decoder = SampleDecoder()
    buffer = io.BytesIO()
    np.save(buffer, np.arange(6).reshape(2, 3))
    assert decoder.decode_part("seg.npy", buffer.getvalue()).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert decoder.decode_part("txt", "héllo".encode()) == "héllo"
    assert decoder.decode_part("json", json.dumps({"a": [1]}).encode()) == {"a": [1]}
    assert decoder.decode_part("cls", b"7") == 7
    assert decoder.decode_part("mpk", msgpack.packb({"x": 1})) == {"x": 1}
    assert decoder.decode_part("bin", b"\x00\x01") == b"\x00\x01"
    raw = {"__key__": "k", "jpg": b"...", "txt": b"a"}
    assert decoder.decode(raw, frozenset({"txt"})) == {"__key__": "k", "jpg": b"...", "txt": "a"}


class Shouting(SampleDecoder):
    """A subclass with its own ``decode_part``: the decoder must call it for every part."""

    def decode_part(self, part: str, data: bytes) -> object:
        return f"{part}:{bytes(data).decode().upper()}"


def test_each_part_names_decoding_is_worked_out_once_and_keeps_every_rule() -> None:
    raw = {"__key__": "k", "txt": b"hi", "label.cls": b"7", "x.txt": b"yo"}
    plain = SampleDecoder()
    for _ in range(2):  # the second sample reuses each name's function
        assert plain.decode(raw) == {"__key__": "k", "txt": "hi", "label.cls": 7, "x.txt": "yo"}
    # a decoders entry wins over the built-in one, as in decode_part
    assert SampleDecoder(decoders={"txt": bytes.upper}).decode(raw)["x.txt"] == b"YO"
    # a subclass's own decode_part is called, not the built-in functions
    assert Shouting().decode(raw)["txt"] == "txt:HI"
    # guessing from the content decides per sample: PNG bytes in a .txt part are an image
    png = _png(np.zeros((2, 3, 3), dtype=np.uint8))
    guessed = SampleDecoder(guess_content=True).decode({"a.txt": png, "b.txt": b"plain"})
    assert guessed["a.txt"].shape == (3, 2, 3) and guessed["b.txt"] == "plain"
