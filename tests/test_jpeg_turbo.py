"""simplejpeg decodes JPEGs when installed (the ``jpeg`` extra), to the same values as Pillow.

Each case decodes the same bytes on both paths in this process: the simplejpeg path as the
loader runs it, and Pillow's with simplejpeg switched off for the call (``_simplejpeg``
set to None, what ``ENERGON_LITE_JPEG_DECODER=pillow`` gives at import)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from energon_lite.decode import jpeg_turbo
from energon_lite.decode.image import decode_image
from energon_lite.errors import ConfigError, MediaDecodeError
from energon_lite.synth.photos import make_photo
from energon_lite.synth.shards import make_image

pytest.importorskip("simplejpeg")


def _jpeg(img: Image.Image, **save: object) -> bytes:
    buffer = io.BytesIO()
    img.save(buffer, format="JPEG", **save)
    return buffer.getvalue()


CASES = {
    "w1 256x256": _jpeg(make_image(3, (256, 256)), quality=90),
    "photo 1000x750": _jpeg(make_photo(1, (1000, 750)), quality=90),
    "photo 4:4:4": _jpeg(make_photo(2, (640, 480)), quality=95, subsampling=0),
    "progressive": _jpeg(make_photo(3, (517, 389)), quality=85, progressive=True),
    "grey": _jpeg(make_photo(4, (300, 200)).convert("L"), quality=90),
}
MODES = ("torchrgb", "torchrgb8", "rgb8", "rgb", "torch", "numpy")
SIZES = (None, (224, 224), (100, 300))


def _pillow(monkeypatch: pytest.MonkeyPatch, *args: object, **kwargs: object) -> object:
    with monkeypatch.context() as patch:
        patch.setattr(jpeg_turbo, "_simplejpeg", None)
        return decode_image(*args, **kwargs)  # type: ignore[arg-type]


def _same(a: object, b: object) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b)
    else:
        assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def test_simplejpeg_is_used_when_installed() -> None:
    assert jpeg_turbo.active()
    assert jpeg_turbo.header(CASES["photo 1000x750"]) == (1000, 750)
    assert jpeg_turbo.header(b"\x89PNG\r\n\x1a\n") is None  # not a JPEG: Pillow's


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("draft", [True, False, 3.0])
def test_the_same_values_as_pillow(
    monkeypatch: pytest.MonkeyPatch, case: str, size: tuple[int, int] | None, draft: object
) -> None:
    if size is None and draft is not True:
        pytest.skip("draft applies only with a size")
    data = CASES[case]
    for mode in MODES:
        got = decode_image(data, mode, size, draft)  # type: ignore[arg-type]
        _same(got, _pillow(monkeypatch, data, mode, size, draft))


def test_any_bytes_like_object_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """decode_image takes what Pillow takes: bytes, bytearray, memoryview (LitData's and
    numpy buffers hand out memoryviews)."""
    data = CASES["photo 1000x750"]
    want = _pillow(monkeypatch, data, "torchrgb", (224, 224))
    for blob in (bytearray(data), memoryview(data), memoryview(bytearray(data))[0:]):
        _same(decode_image(blob, "torchrgb", (224, 224)), want)  # type: ignore[arg-type]


def test_draft_takes_pillows_scale_not_an_in_between_one() -> None:
    # 1000x750 asked for >= 600x450: Pillow keeps the full size (1/2 would be 500 wide);
    # libjpeg-turbo on its own would pick 7/8 (875x657)
    assert jpeg_turbo.draft_scale(1000, 750, (600, 450)) == 1
    assert jpeg_turbo.draft_scale(1000, 750, (500, 375)) == 2
    assert jpeg_turbo.draft_scale(1000, 750, (100, 100)) == 4
    assert jpeg_turbo.draft_scale(1024, 1024, (64, 64)) == 8
    pixels = jpeg_turbo.decode_rgb(CASES["photo 1000x750"], 1000, 750, 2)
    assert pixels is not None and pixels.shape == (375, 500, 3)


def test_cmyk_and_damaged_jpegs_are_left_to_pillow(monkeypatch: pytest.MonkeyPatch) -> None:
    cmyk = _jpeg(make_photo(5, (120, 80)).convert("CMYK"), quality=90)
    assert jpeg_turbo.header(cmyk) is None
    _same(decode_image(cmyk, "torchrgb"), _pillow(monkeypatch, cmyk, "torchrgb"))
    damaged = CASES["photo 1000x750"][: len(CASES["photo 1000x750"]) // 2]
    with pytest.raises(OSError) as turbo_error:
        decode_image(damaged, "rgb8")
    with pytest.raises(OSError) as pillow_error:
        _pillow(monkeypatch, damaged, "rgb8")
    assert str(turbo_error.value) == str(pillow_error.value)


def test_the_pixel_budget_is_checked_from_the_header(monkeypatch: pytest.MonkeyPatch) -> None:
    data = CASES["photo 1000x750"]
    with pytest.raises(MediaDecodeError) as turbo_error:
        decode_image(data, "torchrgb", max_pixels=200_000, name="s1/jpg")
    with pytest.raises(MediaDecodeError) as pillow_error:
        _pillow(monkeypatch, data, "torchrgb", max_pixels=200_000, name="s1/jpg")
    assert str(turbo_error.value) == str(pillow_error.value)
    assert "s1/jpg: JPEG image of 1000x750 = 750,000 pixels" in str(turbo_error.value)
    # drafted first: at 1/2 size (500x375) it fits
    assert decode_image(data, "torchrgb", (100, 100), max_pixels=200_000).shape == (3, 100, 133)


def test_the_environment_switches_it_off_and_names_a_bad_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # what the module does once at import, in this process (no interpreter start per value)
    monkeypatch.setenv(jpeg_turbo.ENV, "pillow")
    assert jpeg_turbo._load() is None
    monkeypatch.setenv(jpeg_turbo.ENV, "auto")
    assert jpeg_turbo._load() is not None
    monkeypatch.setenv(jpeg_turbo.ENV, "turbo")
    with pytest.raises(ConfigError, match="ENERGON_LITE_JPEG_DECODER='turbo': expected one of auto, pillow"):  # fmt: skip
        jpeg_turbo._load()
