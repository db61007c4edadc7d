"""``energon_lite.transforms``: geometric transforms merged into one resampling. The
torchvision transforms themselves are the oracle (same seed, same picture within rounding);
importing the package needs no torchvision."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from energon_lite.transforms import CustomTransform, MergeTransform


class Shift(CustomTransform):
    """Moves the picture 5 pixels right and 3 down."""

    def __init__(self) -> None:
        pass

    def apply_transform(self, matrix: np.ndarray, dst_size: np.ndarray) -> tuple[Any, Any, Any]:
        return self.translate(5, 3) @ matrix, dst_size, ("Shift", (5, 3))


def _picture(width: int, height: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    smooth = np.zeros((height, width, 3), dtype=np.uint8)
    smooth[..., 0] = (np.arange(width)[None, :] * 255 // max(width - 1, 1)).astype(np.uint8)
    smooth[..., 1] = (np.arange(height)[:, None] * 255 // max(height - 1, 1)).astype(np.uint8)
    smooth[..., 2] = rng.integers(0, 40, size=(height, width), dtype=np.uint8)
    return Image.fromarray(smooth)


def test_importing_needs_no_torchvision() -> None:
    code = (
        "import sys, energon_lite.transforms as t\n"
        "assert 'torchvision' not in sys.modules, 'torchvision imported'\n"
        "print(sorted(t.__all__))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "MergeTransform" in done.stdout and "ResizeMapper" in done.stdout


def test_a_custom_transform_alone_and_merged() -> None:
    image = _picture(40, 30)
    out = MergeTransform([Shift()])(image)
    expected = Image.new("RGB", image.size)
    expected.paste(image, (5, 3))
    assert out.size == image.size
    assert np.abs(np.asarray(out, np.int16) - np.asarray(expected, np.int16)).max() <= 1
    assert np.array_equal(np.asarray(Shift()(image)), np.asarray(out))
    # a tensor is shifted the same way
    tensor = torch.as_tensor(np.array(image)).permute(2, 0, 1).float()
    shifted = MergeTransform([Shift()])(tensor)
    assert torch.allclose(shifted[:, 3:, 5:], tensor[:, :-3, :-5], atol=1e-3)
    assert shifted[:, :3].abs().max() < 1e-2


def test_unknown_transforms_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"unsupported transform .*Identity"):
        MergeTransform([torch.nn.Identity()])


def _close(ours: Image.Image, theirs: Image.Image, atol: int) -> bool:
    """Equal within ``atol`` away from the border (at the border a crop-then-resize
    clamps to the crop's edge, a merged transform reads the pixels beyond it)."""
    a, b = np.asarray(ours, np.int16), np.asarray(theirs, np.int16)
    return ours.size == theirs.size and bool(np.abs(a - b)[4:-4, 4:-4].max() <= atol)


def _torchvision_cases() -> list[Any]:
    T = pytest.importorskip("torchvision.transforms")
    return [
        (T.Resize((60, 80)), 2),  # upscaling: torchvision antialiases a downscale
        (T.Resize(50, max_size=90), 2),
        (T.RandomResizedCrop((96, 96)), 2),
        (T.RandomHorizontalFlip(p=0.5), 0),
        (T.RandomVerticalFlip(p=0.5), 0),
        (T.RandomRotation((10, 80)), 2),
        (T.RandomRotation((30, 30), expand=True), 2),
        (T.RandomCrop((25, 40)), 0),
        (T.RandomCrop((70, 90), pad_if_needed=True), 0),
        (T.CenterCrop((21, 33)), 0),
        (T.RandomPerspective(p=1.0), 2),
    ]


def test_each_torchvision_transform_draws_and_draws_as_torchvision() -> None:
    for transform, atol in _torchvision_cases():
        for seed in range(4):
            image = _picture(64, 48, seed)
            torch.manual_seed(seed)
            ours = MergeTransform([transform])(image)
            torch.manual_seed(seed)
            theirs = transform(image)
            if "Perspective" in repr(transform) or "Rotation" in repr(transform):
                # edges of the warped picture differ by a pixel: compare where both have it
                a, b = np.asarray(ours, np.int16), np.asarray(theirs, np.int16)
                both = (a.sum(-1) > 0) & (b.sum(-1) > 0)
                assert ours.size == theirs.size
                assert np.median(np.abs(a - b)[both]) <= atol, (transform, seed)
            else:
                assert _close(ours, theirs, atol), (transform, seed)


def test_merged_rotation_and_crop_match_the_chain() -> None:
    T = pytest.importorskip("torchvision.transforms")
    rotate, crop = T.RandomRotation((45, 269)), T.RandomCrop((30, 30))
    image = _picture(64, 48)
    torch.manual_seed(1)
    ours = MergeTransform([rotate, crop])(image)
    torch.manual_seed(1)
    theirs = crop(rotate(image))
    a, b = np.asarray(ours, np.int16), np.asarray(theirs, np.int16)
    assert ours.size == theirs.size == (30, 30)
    assert np.median(np.abs(a - b)) <= 1


def test_transforms_must_agree_on_interpolation() -> None:
    T = pytest.importorskip("torchvision.transforms")
    bilinear = T.Resize(10)  # RandomRotation resamples with NEAREST by default
    with pytest.raises(ValueError, match="interpolation values are not equal"):
        MergeTransform([bilinear, T.RandomRotation(10)])


def test_tensors_are_resampled_as_torchvision_does() -> None:
    T = pytest.importorskip("torchvision.transforms")
    image = torch.rand(3, 48, 64)
    for transform in (
        T.RandomHorizontalFlip(1.0),
        T.RandomVerticalFlip(1.0),
        T.RandomCrop((20, 30)),
        T.CenterCrop((21, 33)),
        T.Resize((96, 128), antialias=False),
    ):
        torch.manual_seed(0)
        ours = MergeTransform([transform])(image)
        torch.manual_seed(0)
        theirs = transform(image)
        # at the outer pixel an upscale reads zeros beyond the edge, torchvision the edge itself
        inner = (slice(None), slice(2, -2), slice(2, -2))
        assert ours.shape == theirs.shape, transform
        assert torch.allclose(ours[inner], theirs[inner], atol=1e-4), transform
