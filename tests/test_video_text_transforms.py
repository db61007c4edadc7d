"""resize_crop, frame sampling and VideoTextSample decoding on real videos with known frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from energon_lite.errors import MediaDecodeError
from energon_lite.flavors.video_text import (
    VideoTextSample,
    VideoTextTaskEncoder,
    resize_crop,
    sample_frame_indices,
)
from energon_lite.synth.av import frame_pattern, make_video, read_frame_index


def _sample(
    path: Path, num_frames: int, height: int, width: int, key: str = "t:0"
) -> VideoTextSample:
    return VideoTextSample(
        __key__=key,
        __restore_key__=("Webdataset", 0, 0, 0, 0),
        path=str(path),
        text="text",
        num_frames=num_frames,
        height=height,
        width=width,
        fps=30.0,
    )


def _indices(video: torch.Tensor) -> list[int]:
    """Frame indices shown by a (C, T, H, W) [-1, 1] clip."""
    return [read_frame_index(((f + 1) * 127.5).round()) for f in video.permute(1, 0, 2, 3)]


def test_sample_frame_indices_val_train_and_stride() -> None:
    assert sample_frame_indices(100, 4) == [0, 1, 2, 3]
    assert sample_frame_indices(100, 4, frame_interval=3) == [0, 3, 7, 11]  # linspace 0..11
    assert sample_frame_indices(3, 5) == [0, 0, 1, 1, 2]  # short video: spread, repeat
    starts = {sample_frame_indices(50, 8, rng=np.random.default_rng(s))[0] for s in range(40)}
    assert len(starts) > 10 and max(starts) <= 42  # random window, always inside the video
    with pytest.raises(ValueError, match="frame_interval=0"):
        sample_frame_indices(10, 2, frame_interval=0)


def test_resize_crop_shape_range_layout_on_known_frames() -> None:
    frames = torch.stack(
        [torch.from_numpy(frame_pattern(i, 64, 48)).permute(2, 0, 1) for i in (3, 9)]
    )
    out = resize_crop(frames, (24, 32))  # same aspect: a plain 2x downscale
    assert out.shape == (3, 2, 24, 32) and out.dtype == torch.float32  # (C, T, H, W)
    assert out.min() >= -1 and out.max() <= 1 and out.min() == -1 and out.max() == 1
    assert _indices(out) == [3, 9]  # T axis kept in order, channels first
    tall = resize_crop(frames, (48, 32))  # same height, narrower: no resize, centre columns
    assert torch.equal(tall[:, 0], frames[0, :, :, 16:48].float() / 127.5 - 1)
    up = resize_crop(frames, (96, 96))  # upscale to cover 96x128, then crop 96 columns
    assert up.shape == (3, 2, 96, 96)
    columns = torch.arange(64, dtype=torch.uint8).expand(1, 3, 48, 64)  # pixel = its column
    rng = np.random.default_rng(0)
    lefts = {
        round(
            (resize_crop(columns, (48, 32), rng=rng, random_crop=True)[0, 0, 0, 0].item() + 1)
            * 127.5
        )
        for _ in range(20)
    }
    assert len(lefts) > 3 and lefts <= set(range(33))  # random offsets, always inside
    with pytest.raises(ValueError, match="random_crop=True needs rng"):
        resize_crop(frames, (8, 8), random_crop=True)


@pytest.mark.parametrize(
    ("shape", "size"),
    [((4, 3, 36, 64), (36, 64)), ((4, 3, 36, 64), (24, 24)), ((3, 3, 20, 18), (30, 16))],
)
def test_resize_crop_gives_the_values_of_the_plain_formula(
    shape: tuple[int, ...], size: tuple[int, int]
) -> None:
    """Written in place for speed, the output is still, to the bit, interpolate, crop,
    ``x / 127.5 - 1`` clamped to [-1, 1], laid out (C, T, H, W) and contiguous."""
    import torch.nn.functional as F

    frames = torch.randint(
        0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )
    out = resize_crop(frames, size)
    h, w = shape[-2:]
    scale = max(size[0] / h, size[1] / w)
    new_h, new_w = max(size[0], round(h * scale)), max(size[1], round(w * scale))
    want = frames.float()
    if (new_h, new_w) != (h, w):
        want = F.interpolate(want, size=(new_h, new_w), mode="bilinear", align_corners=False,
                             antialias=new_h < h)  # fmt: skip
    top, left = (new_h - size[0]) // 2, (new_w - size[1]) // 2
    want = want[:, :, top : top + size[0], left : left + size[1]]
    want = (want / 127.5 - 1.0).clamp(-1.0, 1.0).permute(1, 0, 2, 3).contiguous()
    assert out.is_contiguous() and out.shape == want.shape
    assert torch.equal(out.view(torch.int32), want.view(torch.int32))


@pytest.mark.parametrize("container", ["mp4", "mkv", "webm", "avi"])
def test_read_frames_decodes_the_asked_frames(tmp_path: Path, container: str) -> None:
    path = tmp_path / f"v.{container}"
    make_video(path, container, num_frames=60, width=32, height=32, fps=30, gop_size=10)
    sample = _sample(path, 60, 32, 32)
    frames = sample.read_frames([2, 3, 3, 40, 59])
    assert frames.shape == (5, 3, 32, 32) and frames.dtype == torch.uint8
    assert [read_frame_index(f) for f in frames] == [2, 3, 3, 40, 59]


def test_encode_sample_takes_evenly_spaced_frames_of_the_bucket(tmp_path: Path) -> None:
    path = tmp_path / "v.mp4"
    make_video(path, "mp4", num_frames=60, width=64, height=48, fps=30, gop_size=10)
    config = {"4:3": {"24x32": {8: (1.0, 2)}}}
    val = VideoTextTaskEncoder(config, training=False, frame_interval=2)
    sample = _sample(path, 60, 48, 64)
    val._set_sample_context(0, sample.__restore_key__)
    out = val.encode_sample(sample)
    assert out["video"].shape == (3, 8, 24, 32) and out["bucket"].target == (8, 24, 32)
    assert _indices(out["video"]) == [0, 2, 4, 6, 8, 10, 12, 15]  # floor(linspace(0, 15, 8))
    assert out["fps"] == 15.0  # the stride halves the frame rate
    train = VideoTextTaskEncoder(config, training=True, frame_interval=2)
    starts = set()
    for epoch in range(6):
        sample.__restore_key__ = ("Webdataset", 0, 0, 0, epoch)
        train._set_sample_context(0, sample.__restore_key__)
        taken = _indices(train.encode_sample(sample)["video"])
        assert np.diff(taken).min() >= 2 and taken[-1] - taken[0] == 15
        starts.add(taken[0])
    assert len(starts) > 1  # a random window per epoch, from the per-sample generator


# one image is a decompression bomb on purpose: Pillow's warning comes with our refusal
@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_images_and_decode_errors(tmp_path: Path) -> None:
    from PIL import Image

    Image.fromarray(frame_pattern(6, 64, 48)).save(tmp_path / "i.png")
    frames = _sample(tmp_path / "i.png", 1, 48, 64).read_frames([0])
    assert frames.shape == (1, 3, 48, 64) and read_frame_index(frames[0]) == 6
    (tmp_path / "bad.mp4").write_bytes(b"not a video at all" * 50)
    with pytest.raises(MediaDecodeError, match=r"sample 'k:7'.*bad\.mp4"):
        _sample(tmp_path / "bad.mp4", 10, 8, 8, key="k:7").read_frames([0, 1])
    make_video(tmp_path / "short.mp4", "mp4", num_frames=10, width=16, height=16)
    with pytest.raises(MediaDecodeError, match=r"sample 'k:8'.*num_frames=30"):
        _sample(tmp_path / "short.mp4", 30, 16, 16, key="k:8").read_frames([5, 20])
    with pytest.raises(MediaDecodeError, match=r"sample 'k:9'.*gone\.jpg"):
        _sample(tmp_path / "gone.jpg", 1, 8, 8, key="k:9").read_frames([0])
    Image.new("1", (13000, 13000)).save(tmp_path / "bomb.png")  # 169 M pixels in 20 KB
    with pytest.raises(MediaDecodeError, match=r"sample 'k:10'.*bomb\.png is 13000x13000, over"):
        _sample(tmp_path / "bomb.png", 1, 13000, 13000, key="k:10").read_frames([0])
