"""uint8 batches (``torchrgb8`` + ``normalize_batch``) and decoding at the task's size (JPEG
draft): the fast image paths give what the float / full-size paths give, within the bounds
their documentation states."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import energon_lite as el
from energon_lite import DefaultTaskEncoder, SampleDecoder, normalize_batch
from energon_lite.decode.image import decode_image
from energon_lite.errors import ConfigError
from energon_lite.synth.photos import photo_jpeg

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class Uint8Encoder(DefaultTaskEncoder):
    decoder = SampleDecoder(image_decode="torchrgb8")


def _batches(root: Path, task_encoder: DefaultTaskEncoder | None, count: int) -> list:
    wc = el.WorkerConfig(rank=0, world_size=1, num_workers=0)
    kwargs = {} if task_encoder is None else {"task_encoder": task_encoder}
    ds = el.get_train_dataset(
        root, worker_config=wc, batch_size=8, shuffle_buffer_size=20,
        max_samples_per_sequence=10, **kwargs,
    )  # fmt: skip
    loader = el.get_savable_loader(ds)
    batches = [batch for _, batch in zip(range(count), loader)]
    loader.close()
    return batches


def test_uint8_batches_equal_the_float_path(train_ds: Path) -> None:
    floats = _batches(train_ds, None, 4)
    uint8s = _batches(train_ds, Uint8Encoder(), 4)
    for f, u in zip(floats, uint8s):
        assert list(f.__key__) == list(u.__key__)
        assert u.image.dtype == torch.uint8 and f.image.dtype == torch.float32
        assert u.image.shape == f.image.shape == (8, 3, 16, 16)
        assert torch.equal(u.image, (f.image * 255).round().to(torch.uint8))
        assert torch.equal(normalize_batch(u.image), f.image)  # bit for bit
        expected = (f.image - torch.tensor(MEAN).view(3, 1, 1)) / torch.tensor(STD).view(3, 1, 1)
        got = normalize_batch(u.image, MEAN, STD, device="cpu")
        assert got.dtype == torch.float32 and torch.equal(got, expected)


def test_normalize_batch_arguments() -> None:
    images = torch.arange(2 * 3 * 2 * 2, dtype=torch.uint8).reshape(2, 3, 2, 2)
    assert torch.equal(normalize_batch(images, 0.5, 0.5), (images.float() / 255 - 0.5) / 0.5)
    assert normalize_batch(images[0], dtype=torch.float64).dtype == torch.float64
    with pytest.raises(ConfigError, match="uint8 tensor"):
        normalize_batch(images.float())
    with pytest.raises(ConfigError, match="one value or 3"):
        normalize_batch(images, mean=(0.1, 0.2))
    with pytest.raises(ConfigError, match="floating point"):
        normalize_batch(images, dtype=torch.int32)


@pytest.mark.parametrize(
    ("source", "target"),
    [((1024, 768), (192, 192)), ((512, 512), (64, 64)), ((600, 800), (100, 150))],
)
def test_draft_decode_within_one_grey_level(
    source: tuple[int, int], target: tuple[int, int]
) -> None:
    decoder = SampleDecoder(image_decode="rgb8", image_size=target)
    full = SampleDecoder(image_decode="rgb8", image_size=target, image_draft=False)
    for index in range(2):
        data = photo_jpeg(index, source)
        drafted = decoder.decode_part("jpg", data).astype(np.float64)
        reference = full.decode_part("jpg", data).astype(np.float64)
        assert drafted.shape == reference.shape
        height, width = drafted.shape[:2]  # covers the target, one side exactly
        assert height >= target[0] and width >= target[1]
        assert height == target[0] or width == target[1]
        assert abs(width / height - source[0] / source[1]) < 0.02
        rms = float(np.sqrt(((drafted - reference) ** 2).mean()))
        assert 0.0 < rms < 1.0, rms  # > 0: the DCT-domain downscaling did happen


def test_image_size_tensor_modes_and_no_enlarging() -> None:
    data = photo_jpeg(3, (320, 240))
    chw = SampleDecoder(image_size=96).decode_part("x.jpg", data)
    assert chw.shape == (3, 96, 128) and chw.dtype == torch.float32
    u8 = SampleDecoder(image_decode="torchrgb8", image_size=96).decode_part("x.jpg", data)
    assert u8.shape == (3, 96, 128) and torch.equal(normalize_batch(u8), chw)
    same = decode_image(data, "rgb8", (480, 480))  # larger than the source: left alone
    assert same.shape == (240, 320, 3)
    assert np.array_equal(same, decode_image(data, "rgb8"))
    for bad in ((0, 5), (5,), "big", (2.5, 3)):
        with pytest.raises(ConfigError, match="image_size"):
            SampleDecoder(image_size=bad)  # type: ignore[arg-type]


def test_image_draft_factor() -> None:
    data = photo_jpeg(4, (512, 512))
    exact = SampleDecoder(image_decode="rgb8", image_size=128, image_draft=False)
    fast = SampleDecoder(image_decode="rgb8", image_size=128, image_draft=1.0)
    a, b = (d.decode_part("jpg", data).astype(np.float64) for d in (exact, fast))
    assert a.shape == b.shape == (128, 128, 3)
    assert 0.0 < float(np.sqrt(((a - b) ** 2).mean())) < 5.0  # the 1/4 scale, still close
    with pytest.raises(ConfigError, match="image_draft"):
        SampleDecoder(image_size=128, image_draft=0.5)


@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA"])
@pytest.mark.parametrize(("source", "target"), [((1024, 768), (256, 192)), ((333, 517), (97, 150))])
def test_resize_is_pillows_bicubic(
    mode: str, source: tuple[int, int], target: tuple[int, int]
) -> None:
    """The numpy/torch layouts resize with torch's antialiased bicubic: Pillow's filter, so
    every pixel is within one grey level of ``Image.resize(..., BICUBIC)``."""
    from PIL import Image

    from energon_lite.decode.resize import resize_uint8

    img = Image.open(__import__("io").BytesIO(photo_jpeg(5, source))).convert(mode)
    ours = resize_uint8(img, target).permute(1, 2, 0).numpy().astype(np.int16)
    pillow = np.array(img.resize(target, Image.Resampling.BICUBIC)).astype(np.int16)
    if pillow.ndim == 2:
        pillow = pillow[:, :, None]
    assert ours.shape == pillow.shape == (target[1], target[0], len(mode))
    assert int(np.abs(ours - pillow).max()) <= 1
    assert float(np.sqrt(((ours - pillow) ** 2).mean())) < 0.1


def test_resized_layouts_agree() -> None:
    """Every layout of one resized JPEG holds the same pixels; ``pil`` is Pillow's own resize."""
    data = photo_jpeg(6, (640, 480))
    u8 = decode_image(data, "torchrgb8", (120, 120))
    assert u8.shape == (3, 120, 160) and u8.is_contiguous()
    assert torch.equal(decode_image(data, "torchrgb", (120, 120)), normalize_batch(u8))
    hwc = decode_image(data, "rgb8", (120, 120))
    assert np.array_equal(hwc, u8.permute(1, 2, 0).numpy())
    assert np.array_equal(decode_image(data, "rgb", (120, 120)), hwc.astype(np.float32) / 255)
    pil = np.array(decode_image(data, "pilrgb", (120, 120))).astype(np.int16)
    assert pil.shape == hwc.shape and int(np.abs(pil - hwc.astype(np.int16)).max()) <= 1
    grey = decode_image(data, "torchl8", (120, 120))
    assert grey.shape == (1, 120, 160) and grey.dtype == torch.uint8
