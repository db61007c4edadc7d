"""Synchronised buckets by default for video-text training: weights, thinning, 2 gloo ranks."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset
from energon_lite.flavors.video_text import VideoTextTaskEncoder, prepare_video_text
from energon_lite.flavors.video_text.buckets import BucketId
from energon_lite.synth.video_text import make_media, write_table
from energon_lite.testing import take

# 40 rows cycling wide.mp4 (48 frames, 48x64), tall.mkv (40, 64x48), small.webm (24, 32x48),
# old.avi (36, 48x64), still.jpg (1, 48x64): 8 rows each.
BUCKETS = {
    "4:3": {"48x64": {1: (1.0, 3), 16: (1.0, 2)}},
    "3:4": {"64x48": {8: (1.0, 3)}},
    "3:2": {"32x48": {8: (1.0, 4)}},
}
IMAGE = BucketId("48x64", 1, "4:3", 48, 64, 3)
WIDE16 = BucketId("48x64", 16, "4:3", 48, 64, 2)
TALL8 = BucketId("64x48", 8, "3:4", 64, 48, 3)
SMALL8 = BucketId("32x48", 8, "3:2", 32, 48, 4)


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("vt_sync")
    csv_path = write_table(folder / "videos.csv", make_media(folder), 40)
    prepare_video_text(csv_path, progress=False)
    return csv_path


def test_default_weights_and_thinning_match_hand_computed_values(table: Path) -> None:
    te = VideoTextTaskEncoder(BUCKETS, seed=0)
    option = te.default_bucket_sync(table, "train")
    assert option is not None
    # every bucket has weight 1.0 in the config: P(bucket) = 1/4 each, as the document says
    assert option["weights"] == {IMAGE: 1.0, WIDE16: 1.0, TALL8: 1.0, SMALL8: 1.0}
    # batches per pass: wide+old 16 rows / 2 = 8; tall 8/3; small 8/4 = 2; image 8/3.
    # keep = (weight / batches) / max(weight / batches) = 2 / batches
    assert te.keep is not None
    assert te.keep == pytest.approx({IMAGE: 0.75, WIDE16: 0.25, TALL8: 0.75, SMALL8: 1.0})


def test_weights_follow_the_config_and_opt_out_is_the_per_rank_mode(table: Path) -> None:
    config = {
        "4:3": {"48x64": {1: (2.0, 3), 16: (1.0, 2)}},
        "3:4": {"64x48": {8: (0.5, 3)}},
        "3:2": {"32x48": {8: (0.0, 4)}},  # weight 0: never chosen, its rows dropped
    }
    te = VideoTextTaskEncoder(config, seed=0)
    option = te.default_bucket_sync(table, "train")
    assert option is not None and option["weights"] == {IMAGE: 2.0, WIDE16: 1.0, TALL8: 0.5}
    # weight / batches: image 2/(8/3) = 0.75, wide 1/8, tall 0.5/(8/3) = 0.1875
    assert te.keep == pytest.approx({IMAGE: 1.0, WIDE16: 1 / 6, TALL8: 0.25})
    off = VideoTextTaskEncoder(config, seed=0, sync_buckets=False)
    assert off.default_bucket_sync(table, "train") is None and off.keep is None


def test_a_metadataset_falls_back_to_per_rank_with_a_warning(table: Path, caplog) -> None:
    te = VideoTextTaskEncoder(BUCKETS)
    assert te.default_bucket_sync(table.parent / "mix.yaml", "train") is None
    assert "per-rank mode" in caplog.text


def _loader(path: str, sync: bool):
    te = VideoTextTaskEncoder(BUCKETS, seed=0, sync_buckets=sync)
    dataset = get_train_dataset(
        path,
        worker_config=WorkerConfig.default_worker_config(num_workers=2),
        batch_size=None,
        shuffle_buffer_size=8,
        max_samples_per_sequence=5,
        task_encoder=te,
    )
    return get_savable_loader(dataset)


def _rank_main(rank: int, path: str, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        loader = _loader(path, sync=True)
        first = take(loader, 3)
        state = loader.save_state_rank()
        rest = take(loader, 9)
        resumed = _loader(path, sync=True)
        resumed.restore_state_rank(state)
        again = take(resumed, 9)
        per_rank = take(_loader(path, sync=False), 12)
        result = {
            "shapes": [list(b["video"].shape) for b in first + rest],
            "keys": [k for b in first + rest for k in b["__key__"]],
            "rest": [b["__key__"] for b in rest],
            "again": [b["__key__"] for b in again],
            "per_rank": [list(b["video"].shape) for b in per_rank],
        }
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.timeout(300)
def test_two_gloo_ranks_emit_the_same_bucket_at_every_step(table: Path, tmp_path: Path) -> None:
    mp.start_processes(
        _rank_main, args=(str(table), _free_port(), str(tmp_path)), nprocs=2, start_method="fork"
    )
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2))
    assert r0["shapes"] == r1["shapes"]  # same (B, C, T, H, W) at each of 12 steps
    assert len({tuple(s) for s in r0["shapes"]}) > 1  # and the bucket does change
    assert r0["keys"] != r1["keys"]  # different samples, same shapes
    assert r0["again"] == r0["rest"] and r1["again"] == r1["rest"]  # exact resume per rank
    # the per-rank mode has no such guarantee: the ranks' shapes part at some step
    assert r0["per_rank"] != r1["per_rank"]


def test_resolution_form_distribution_is_exact_and_matches_assign() -> None:
    from energon_lite.flavors.video_text.buckets import BucketAssigner

    # A 240x426 clip of 20 frames: at 240p, frames 16 move on with 0.3 (to 8) and are kept
    # with 0.5; frames 8 kept with 0.7; what is not kept falls to 144p, which keeps all.
    config = {"240p": {16: ((0.5, 0.3), 4), 8: (0.7, 8)}, "144p": {8: (1.0, 8)}}
    assigner = BucketAssigner(config, seed=1)
    by_frames = {
        (b.resolution, b.num_frames): p for b, p in assigner.distribution(20, 240, 426).items()
    }
    expected = {("240p", 16): 0.7 * 0.5, ("240p", 8): 0.3 * 0.7, ("144p", 8): 1 - 0.35 - 0.21}
    assert by_frames == pytest.approx(expected)
    drawn = [assigner.assign(20, 240, 426, ("probe", i)) for i in range(4000)]
    freq = {k: sum((b.resolution, b.num_frames) == k for b in drawn) / 4000 for k in expected}
    assert freq == pytest.approx(expected, abs=0.03)
