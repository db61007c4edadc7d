"""The video-text CSV through the loader: buckets, bad media, features, metadatasets, resume."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset, get_val_dataset
from energon_lite.errors import ConfigError
from energon_lite.flavors.video_text import VideoTextTaskEncoder, prepare_video_text, resize_crop
from energon_lite.synth.video_text import make_media, write_table
from energon_lite.testing import assert_loader_resumes, take

# 48x64 and 64x48 videos and the 48x64 image; the 32x48 webm goes to 3:2
BUCKETS = {
    "4:3": {"48x64": {1: (1.0, 3), 16: (1.0, 2)}},
    "3:4": {"64x48": {8: (1.0, 3)}},
    "3:2": {"32x48": {8: (1.0, 4)}},
}
SHAPES = {2: (16, 48, 64), 3: (8, 64, 48), 4: (8, 32, 48)}


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("vt_loader")
    csv_path = write_table(folder / "videos.csv", make_media(folder), 40)
    prepare_video_text(csv_path, progress=False)
    return csv_path


def _train(path: Path, num_workers: int = 0, **kwargs) -> object:
    kwargs.setdefault("task_encoder", VideoTextTaskEncoder(BUCKETS, seed=3, random_crop=True))
    return get_train_dataset(
        path,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=num_workers),
        batch_size=None,
        shuffle_buffer_size=8,
        max_samples_per_sequence=5,
        **kwargs,
    )


def test_batches_have_one_shape_and_the_buckets_batch_size(table: Path) -> None:
    batches = take(get_savable_loader(_train(table)), 24)
    seen = set()
    for batch in batches:
        video = batch["video"]
        assert video.dtype == torch.float32 and video.min() >= -1 and video.max() <= 1
        if video.shape[2] == 1:  # the image bucket
            assert tuple(video.shape) == (3, 3, 1, 48, 64)
            assert all(t.startswith("clip ") for t in batch["text"])
        else:
            size = video.shape[0]
            assert tuple(video.shape[1:]) == (3, *SHAPES[size])
        assert len(batch["text"]) == len(batch["__key__"]) == video.shape[0]
        seen.add(tuple(video.shape))
    assert len(seen) == 4  # every bucket was emitted


def test_corrupt_and_missing_media_are_skipped_and_logged(
    table: Path, tmp_path: Path, caplog
) -> None:
    (tmp_path / "media").symlink_to(table.parent / "media")
    (tmp_path / "broken.mp4").write_bytes(b"\x00garbage" * 100)
    lines = [
        "path,text,num_frames,height,width\n",
        "broken.mp4,bad,48,48,64\n",
        "nowhere.mp4,gone,48,48,64\n",
    ]
    lines += ["media/wide.mp4,good,48,48,64\n"] * 6
    (tmp_path / "mixed.csv").write_text("".join(lines))
    prepare_video_text(tmp_path / "mixed.csv", progress=False)
    with caplog.at_level(logging.WARNING, logger="energon_lite"):
        batches = take(get_savable_loader(_train(tmp_path / "mixed.csv", repeat=False)), 10)
    assert sorted(t for b in batches for t in b["text"]) == ["good"] * 6
    assert "key='mixed:0'" in caplog.text and "broken.mp4" in caplog.text
    assert "key='mixed:1'" in caplog.text and "nowhere.mp4" in caplog.text


def test_precomputed_features_replace_decoding(tmp_path: Path) -> None:
    (tmp_path / "feat").mkdir()
    for i in range(4):
        torch.save(torch.full((4, 2, 6, 8), float(i)), tmp_path / f"feat/{i}.pt")
        np.save(tmp_path / f"feat/{i}.npy", np.full((5, 16), i, dtype=np.float32))
    lines = ["path,text,num_frames,height,width,latents_path,text_t5_path\n"]
    lines += [f"no_video_needed.mp4,t{i},48,48,64,feat/{i}.pt,feat/{i}.npy\n" for i in range(4)]
    (tmp_path / "feat.csv").write_text("".join(lines))
    prepare_video_text(tmp_path / "feat.csv", progress=False, missing_media="ignore")
    batches = take(get_savable_loader(_train(tmp_path / "feat.csv", repeat=False)), 5)
    assert len(batches) == 2 and "video" not in batches[0]
    for batch in batches:
        assert batch["latents"].shape == (2, 4, 2, 6, 8) and batch["text_t5"].shape == (2, 5, 16)
        ids = [int(t[1:]) for t in batch["text"]]
        assert batch["latents"][:, 0, 0, 0, 0].tolist() == ids == batch["text_t5"][:, 0, 0].tolist()


def test_inside_a_metadataset_with_a_webdataset_free_blend(table: Path, tmp_path: Path) -> None:
    prepared = table.parent / "videos.energon"
    yaml = tmp_path / "mix.yaml"
    yaml.write_text(
        "__module__: energon_lite\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        f"      - {{weight: 1, path: {prepared}, subset: {{range: [0, 20]}}}}\n"
        f"      - {{weight: 1, path: {prepared}, subset: {{range: [20, 40]}}}}\n"
    )
    batches = take(get_savable_loader(_train(yaml)), 12)
    rows = {int(k.split(":")[1]) for b in batches for k in b["__key__"]}
    assert rows and rows <= set(range(40)) and min(rows) < 20 <= max(rows)


def test_val_reads_every_row_once_from_frame_zero(table: Path) -> None:
    te = VideoTextTaskEncoder(BUCKETS, training=False)
    ds = get_val_dataset(table, worker_config=WorkerConfig(0, 1, 0), batch_size=None,
                         split_part="train", task_encoder=te)  # fmt: skip
    batches = list(get_savable_loader(ds))
    keys = sorted(int(k.split(":")[1]) for b in batches for k in b["__key__"])
    assert keys == list(range(40))
    from energon_lite.synth.av import read_frame_index

    clip = next(b for b in batches if b["video"].shape[2] == 16)["video"][0]
    first = read_frame_index(((clip[:, 0] + 1) * 127.5).round())
    assert first == 0


@pytest.mark.parametrize("num_workers", [0, 2])
def test_exact_resume(table: Path, num_workers: int) -> None:
    def key(batch: dict) -> tuple:
        return tuple(batch["__key__"]), round(float(batch["video"].sum()), 2)

    assert_loader_resumes(
        lambda: get_savable_loader(_train(table, num_workers)),
        total=10,
        save_points=[0, 3, 7],
        key=key,
    )


@pytest.mark.parametrize("num_workers", [0, 2])
def test_open_videos_kept_between_samples_give_the_same_batches(
    table: Path, num_workers: int
) -> None:
    """40 rows over 4 videos: with each worker keeping its videos open (the default) the
    batches are those of opening every sample's video afresh, to the bit."""
    batches = {}
    for open_videos in (0, 2):
        encoder = VideoTextTaskEncoder(BUCKETS, seed=3, random_crop=True, open_videos=open_videos)
        loader = get_savable_loader(_train(table, num_workers, task_encoder=encoder))
        batches[open_videos] = take(loader, 12)
        if num_workers == 0:  # the encoder ran here: its cache holds the videos it read
            assert (encoder._videos is None) == (open_videos == 0)
            assert open_videos == 0 or 1 <= len(encoder._videos) <= 2
    for kept, fresh in zip(batches[2], batches[0], strict=True):
        assert kept["__key__"] == fresh["__key__"]
        assert torch.equal(kept["video"], fresh["video"])
    with pytest.raises(ConfigError, match="open_videos=-1"):
        VideoTextTaskEncoder(BUCKETS, open_videos=-1)


def _copying(
    frames: torch.Tensor, size: tuple[int, int], rng: np.random.Generator | None
) -> torch.Tensor:
    """The built-in random crop as a transform of the user's: each clip a tensor of its own."""
    return resize_crop(frames, size, rng=rng, random_crop=rng is not None)


class CopyingTaskEncoder(VideoTextTaskEncoder):
    """Each clip made on its own and copied into its batch (the path before clips were
    written into their bucket's batch, ``batching/group_slab.py``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.transform = _copying


# BUCKETS with the 64x48 mkv resized to 32x24 (antialiased) instead of kept at its size
RESIZING = {**BUCKETS, "3:4": {"32x24": {8: (1.0, 3)}}}


@pytest.mark.parametrize("num_workers", [0, 2])
def test_clips_written_into_the_batch_equal_stacked_clips_to_the_bit(
    table: Path, num_workers: int
) -> None:
    def batches(encoder: VideoTextTaskEncoder) -> list[tuple[list[str], torch.Tensor]]:
        loader = get_savable_loader(_train(table, num_workers, task_encoder=encoder))
        return [(b["__key__"], b["video"].clone()) for b in take(loader, 24)]

    got = batches(VideoTextTaskEncoder(RESIZING, seed=5, random_crop=True))
    want = batches(CopyingTaskEncoder(RESIZING, seed=5, random_crop=True))
    shapes = set()
    for (keys, video), (want_keys, want_video) in zip(got, want, strict=True):
        assert keys == want_keys
        assert video.shape == want_video.shape and video.is_contiguous()
        assert torch.equal(video.view(torch.int32), want_video.view(torch.int32))
        shapes.add(tuple(video.shape[1:]))
    assert (3, 8, 32, 24) in shapes and (3, 16, 48, 64) in shapes  # resized, and at size
    assert len(shapes) == 4
