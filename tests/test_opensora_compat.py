"""Open-Sora's interface (``energon_lite.flavors.video_text.opensora``) on real videos.

Expected values are worked out by hand from the requirement document's rules, not from
our code: a sample goes to the configured aspect ratio nearest its own, then to the
largest frame count <= its frames (images only to 1); a bucket is chosen with probability
weight / sum(weights); frames are resized keeping the aspect ratio so that the short side
fits, centre-cropped, mapped by x / 127.5 - 1 and laid out (C, T, H, W); the stride is
total // T.
"""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from energon_lite.errors import ConfigError
from energon_lite.flavors.video_text.opensora import (
    VariableBatchSampler,
    VariableVideoTextDataset,
    prepare_dataloader,
)
from energon_lite.flavors.video_text.transforms import get_transform, stride_frame_indices
from energon_lite.stages.bucket_sync import choose_bucket
from energon_lite.synth.av import frame_pattern, make_video, read_frame_index

BUCKETS = {
    "1:1": {32: {1: (1.0, 4), 17: (1.0, 2), 65: (0.5, 1)}},
    "16:9": {"36x64": {17: (1.0, 2)}},
}
SQUARE17 = (2, 3, 17, 32, 32)  # square.mp4: 40 frames 32x32 -> largest t <= 40 is 17
LONG65 = (1, 3, 65, 32, 32)  # long.mkv: 300 frames 32x32 -> 65
WIDE17 = (2, 3, 17, 36, 64)  # wide.mp4: 20 frames 36x64 -> 16:9, 17
IMAGE1 = (4, 3, 1, 32, 32)  # still.jpg 32x32 -> 1:1, 1 frame


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from PIL import Image

    folder = tmp_path_factory.mktemp("opensora")
    make_video(folder / "square.mp4", "mp4", num_frames=40, width=32, height=32, gop_size=8)
    make_video(folder / "long.mkv", "mkv", num_frames=300, width=32, height=32, gop_size=16)
    make_video(folder / "wide.mp4", "mp4", num_frames=20, width=64, height=36, gop_size=8)
    Image.fromarray(frame_pattern(9, 32, 32)).save(folder / "still.jpg", quality=95)
    header = "path,text,num_frames,height,width,fps\n"
    # square and wide rows alternate, so that each loader worker's range of rows (Energon's
    # dealing) holds both shapes, as a shuffled table's would: bucket_sync needs every worker
    # to have samples of the buckets it is asked for
    a = [
        row
        for i in range(4)
        for row in (f"square.mp4,square {i},40,32,32,30", f"wide.mp4,wide {i},20,36,64,30")
    ]
    (folder / "a.csv").write_text(header + "\n".join(a) + "\n")
    b = [f"long.mkv,long {i},300,32,32,30" for i in range(2)]
    (folder / "b.csv").write_text(header + "\n".join(b) + "\n")
    images = [f"still.jpg,still {i},32,32" for i in range(8)]  # no num_frames column
    (folder / "images.csv").write_text("path,text,height,width\n" + "\n".join(images) + "\n")
    return {name: folder / f"{name}.csv" for name in ("a", "b", "images")}


def _dataset(tables: dict[str, Path], **kw) -> VariableVideoTextDataset:
    return VariableVideoTextDataset(
        data_path=[tables["a"], tables["b"]], image_data_path=tables["images"], **kw
    )


def test_the_documents_transform_example() -> None:
    # 1920x1080, 16:9 -> resize keeping the ratio, short side 256: 455x256 -> centre 256x256
    flat = torch.full((1, 3, 1080, 1920), 51, dtype=torch.uint8)
    out = get_transform("resize_crop")(flat, (256, 256), None)
    assert out.shape == (3, 1, 256, 256) and out.dtype == torch.float32
    assert torch.allclose(out, torch.full_like(out, 51 / 127.5 - 1))  # -0.6
    halves = torch.zeros((1, 3, 1080, 1920), dtype=torch.uint8)
    halves[..., 960:] = 255
    out = get_transform("center_crop")(halves, (256, 256), None)
    # 455 wide, edge at 227.5, crop from (455 - 256) / 2 = 99.5: the edge lands mid-crop
    left, right = out[..., :120], out[..., 136:]
    assert torch.allclose(left, -torch.ones_like(left), atol=1e-5)
    assert torch.allclose(right, torch.ones_like(right), atol=1e-5)
    crops = {
        float(get_transform("random_crop")(halves, (256, 256), np.random.default_rng(s)).mean())
        for s in range(6)
    }
    assert len(crops) > 1  # random_crop moves the window when given a generator
    with pytest.raises(ConfigError, match="transform_name"):
        get_transform("rand_size_crop")


def test_stride_of_the_documents_example() -> None:
    assert stride_frame_indices(300, 17) == list(range(0, 273, 17))  # 0, 17, ..., 272
    starts = {stride_frame_indices(300, 17, rng=np.random.default_rng(s))[0] for s in range(60)}
    assert starts <= set(range(0, 28)) and len(starts) > 5  # 300 - 272 = 28 start frames


def test_buckets_shapes_weights_and_epoch_length(tables: dict[str, Path]) -> None:
    dataset = _dataset(tables, transform_name="resize_crop")
    assert len(dataset) == 8 + 2 + 8
    loader, sampler = prepare_dataloader(dataset, bucket_config=BUCKETS, seed=5, num_workers=0)
    assert isinstance(sampler, VariableBatchSampler)
    # each bucket supplies 2 batches per pass (4/2, 4/2, 2/1, 8/4); the 65-frame bucket
    # has weight 0.5, so half of its samples are kept: 2 + 2 + 1 + 2 = 7 steps per epoch
    assert len(loader) == len(sampler) == 7
    shapes = Counter()
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for batch in loader:
            shapes[tuple(batch["video"].shape)] += 1
            assert len(batch["text"]) == batch["video"].shape[0]
            assert batch["video"].min() >= -1 and batch["video"].max() <= 1
    assert set(shapes) == {SQUARE17, LONG65, WIDE17, IMAGE1} and sum(shapes.values()) == 14
    # P(bucket) = weight / sum(weights): 1 / 3.5 each, 0.5 / 3.5 for 65 frames
    weights = sampler.bucket_sync["weights"]
    assert sorted(weights.values()) == [0.5, 1.0, 1.0, 1.0]
    drawn = Counter(choose_bucket(5, step, weights).num_frames for step in range(7000))
    assert abs(drawn[65] - 1000) < 120 and abs(drawn[1] - 2000) < 160


def test_fixed_shape_mode_with_stride_sampling(tables: dict[str, Path]) -> None:
    dataset = VariableVideoTextDataset(
        data_path=tables["b"], num_frames=17, image_size=(32, 32), temporal_sampling="stride"
    )
    loader, _ = prepare_dataloader(dataset, batch_size=2, num_workers=0, seed=1)
    assert len(loader) == 1  # 2 rows, batch 2
    batch = next(iter(loader))
    assert tuple(batch["video"].shape) == (2, 3, 17, 32, 32)
    for clip in batch["video"]:
        pixels = ((clip.permute(1, 0, 2, 3) + 1) * 127.5).round().to(torch.uint8)
        indices = [read_frame_index(frame) for frame in pixels]
        assert np.diff(indices).tolist() == [17] * 16 and 0 <= indices[0] <= 27
    assert batch["fps"] == [30 / 17, 30 / 17]
    with pytest.raises(ConfigError, match="num_frames"):
        prepare_dataloader(VariableVideoTextDataset(data_path=tables["b"]), batch_size=2)


def test_sampler_state_resumes_exactly_mid_epoch(tables: dict[str, Path]) -> None:
    def make():
        return prepare_dataloader(
            _dataset(tables), bucket_config=BUCKETS, seed=2, num_workers=2, shuffle=True
        )

    loader, sampler = make()
    first = [b["__key__"] for b in itertools.islice(loader, 3)]
    state = sampler.state_dict()
    rest = [b["__key__"] for b in loader]  # the other 4 steps of epoch 0
    loader2, sampler2 = make()
    sampler2.load_state_dict(state)
    assert [b["__key__"] for b in loader2] == rest
    assert len(first) == 3 and len(rest) == 4
    next_epoch = [b["__key__"] for b in loader]
    assert len(next_epoch) == 7 and sampler.state_dict()["epoch"] == 1


def test_argument_errors_name_the_argument(tables: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match="transform_name"):
        VariableVideoTextDataset(data_path=tables["a"], transform_name="nope")
    with pytest.raises(ConfigError, match="batch_size or bucket_config"):
        prepare_dataloader(VariableVideoTextDataset(data_path=tables["a"]))
    with pytest.raises(ConfigError, match="unknown arguments"):
        prepare_dataloader(VariableVideoTextDataset(data_path=tables["a"]), batch_size=2, foo=1)
    with pytest.raises(ConfigError, match="does not exist"):
        VariableVideoTextDataset(data_path=tables["a"].parent / "missing.csv")
