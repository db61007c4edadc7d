"""The episode index: scan, save/load, global index -> (episode, frame), bad episodes."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from energon_lite.errors import DatasetFormatError, TooManyFailuresError
from energon_lite.flavors.episodes.index import (
    DEFAULT_SUCCESS,
    INDEX_PATH,
    load_episode_index,
    open_episode_index,
    prepare_episodes,
    scan_episodes,
)
from energon_lite.synth.episodes import write_dataset, write_episode

LENGTHS = [3, 1, 1, 5, 2, 1]


@pytest.fixture
def folder(tmp_path):
    return write_dataset(tmp_path / "eps", LENGTHS, [True, False, None, True, False, True])


def test_prepare_writes_small_index_and_load_round_trips(folder):
    path = prepare_episodes(folder)
    assert path == folder / INDEX_PATH and path.stat().st_size < 10_000
    index = load_episode_index(folder)
    assert index.paths.tolist() == [f"episode_{i}.hdf5" for i in range(len(LENGTHS))]
    assert index.lengths.tolist() == LENGTHS
    assert index.labels.tolist() == [True, False, DEFAULT_SUCCESS, True, False, True]
    assert index.cameras_of(0) == ["cam_high", "cam_left_wrist"]
    assert (index.qpos_dim, index.action_dim) == (4, 4)
    assert index.fingerprint() == scan_episodes(folder).fingerprint()


def test_locate_matches_brute_force_at_every_index(folder):
    index = scan_episodes(folder)
    expected = [(e, t) for e, n in enumerate(LENGTHS) for t in range(n)]
    assert index.total_frames == len(expected)
    episodes, frames = index.locate(np.arange(index.total_frames))
    assert list(zip(episodes.tolist(), frames.tolist())) == expected
    for g, (e, t) in enumerate(expected):  # scalar path too, incl. every boundary
        ep, fr = index.locate(g)
        assert (int(ep), int(fr)) == (e, t)
    for bad in (-1, index.total_frames):
        with pytest.raises(IndexError):
            index.locate(bad)


def test_bad_episodes_are_skipped_and_logged_naming_file_and_key(tmp_path, caplog):
    import h5py  # when used, not at collection (see installed_or_skip in conftest.py)

    folder = write_dataset(tmp_path / "eps", [4, 2])
    with h5py.File(folder / "no_action.hdf5", "w") as f:
        f.create_dataset("observations/qpos", data=np.zeros((3, 4), np.float32))
    with h5py.File(folder / "mismatch.hdf5", "w") as f:
        f.create_dataset("observations/qpos", data=np.zeros((3, 4), np.float32))
        f.create_dataset("action", data=np.zeros((2, 4), np.float32))
    with h5py.File(folder / "empty.hdf5", "w") as f:
        f.create_dataset("observations/qpos", data=np.zeros((0, 4), np.float32))
        f.create_dataset("action", data=np.zeros((0, 4), np.float32))
    write_episode(folder / "wide.hdf5", 3, qpos_dim=7)
    (folder / "garbage.h5").write_bytes(b"not hdf5")
    with caplog.at_level(logging.WARNING, logger="energon_lite"):
        index = scan_episodes(folder, failure_tolerance=10)
    assert index.paths.tolist() == ["episode_0.hdf5", "episode_1.hdf5"]
    reasons = dict(index.skipped)
    assert set(reasons) == {
        "no_action.hdf5",
        "mismatch.hdf5",
        "empty.hdf5",
        "wide.hdf5",
        "garbage.h5",
    }
    assert "/action" in reasons["no_action.hdf5"]
    assert "3 frames but /action has 2" in reasons["mismatch.hdf5"]
    assert "empty episode" in reasons["empty.hdf5"]
    assert "dims" in reasons["wide.hdf5"]
    assert "mismatch.hdf5" in caplog.text
    prepare_episodes(folder, failure_tolerance=10)
    assert dict(load_episode_index(folder).skipped) == reasons
    with pytest.raises(TooManyFailuresError, match="failure_tolerance=1"):
        scan_episodes(folder, failure_tolerance=1)


def test_no_usable_episode_and_corrupt_index_raise(tmp_path):
    (tmp_path / "a.hdf5").write_bytes(b"junk")
    with pytest.raises(DatasetFormatError, match="no usable HDF5 episode"):
        scan_episodes(tmp_path)
    folder = write_dataset(tmp_path / "eps", [2])
    with pytest.raises(DatasetFormatError, match="energon-lite prepare"):
        load_episode_index(folder)
    assert open_episode_index(folder).lengths.tolist() == [2]  # scans and saves
    assert (folder / INDEX_PATH).is_file()
    (folder / INDEX_PATH).write_bytes(b"corrupt")
    with pytest.raises(DatasetFormatError, match="corrupt episode index"):
        open_episode_index(folder)


def test_require_cameras_leaves_out_and_logs_episodes_missing_a_camera(tmp_path, caplog):
    folder = write_dataset(tmp_path / "eps", [2, 3, 4])
    write_episode(folder / "episode_1.hdf5", 3, cameras=("cam_high",))
    index = scan_episodes(folder)
    with caplog.at_level(logging.WARNING, logger="energon_lite"):
        kept = index.require_cameras(["cam_high", "cam_left_wrist"])
    assert kept.paths.tolist() == ["episode_0.hdf5", "episode_2.hdf5"]
    assert kept.cum_lengths.tolist() == [2, 6]
    assert "episode_1.hdf5" in caplog.text and "cam_left_wrist" in caplog.text
    with pytest.raises(TooManyFailuresError, match="observations/images/cam_left_wrist"):
        index.require_cameras(["cam_high", "cam_left_wrist"], failure_tolerance=0)
    with pytest.raises(DatasetFormatError, match="cam_nope"):
        index.require_cameras(["cam_nope"], failure_tolerance=5)


def _write_bomb(path, length, qpos_dim=4, shape=(8000, 8000)):
    """An episode whose cameras declare ``length`` frames of ``shape`` x 3 bytes: chunked and
    compressed but never written, so the file stays a few KB."""
    import h5py  # when used, not at collection (see installed_or_skip in conftest.py)

    with h5py.File(path, "w") as f:
        f.attrs["success"] = True
        f.create_dataset("observations/qpos", data=np.zeros((length, qpos_dim), np.float32))
        f.create_dataset("action", data=np.zeros((length, 4), np.float32))
        for cam in ("cam_high", "cam_left_wrist"):
            f.create_dataset(
                f"observations/images/{cam}", shape=(length, *shape, 3), dtype=np.uint8,
                chunks=(1, 64, 64, 3), compression="gzip",
            )  # fmt: skip
    return path


def test_cameras_declaring_huge_frames_are_left_out_at_prepare(tmp_path, caplog):
    folder = write_dataset(tmp_path / "eps", [4, 2])
    bomb = _write_bomb(folder / "bomb.hdf5", 60)
    assert bomb.stat().st_size < 100_000  # 60 x 8000 x 8000 x 3 = 11.5 GB declared
    with caplog.at_level(logging.WARNING, logger="energon_lite"):
        prepare_episodes(folder, progress=False)
    index = load_episode_index(folder)
    assert index.paths.tolist() == ["episode_0.hdf5", "episode_1.hdf5"]
    (path, why), = index.skipped  # fmt: skip
    assert path == "bomb.hdf5"
    assert "/observations/images/cam_high declares frames of shape (8000, 8000, 3)" in why
    assert "64,000,000 pixels, over the budget of 16,777,216 pixels per frame" in why
    assert "bomb.hdf5" in caplog.text
    assert index.frame_shape(0, "observations/images/cam_high") == (4, 24, 32, 3)
    wide = scan_episodes(folder, max_frame_pixels=8000 * 8000)  # the budget is a setting
    assert "bomb.hdf5" in wide.paths.tolist()


def _builder(index):
    from energon_lite.flavors.episodes.transitions import TransitionBuilder

    unit = {"qpos_mean": 0.0, "qpos_std": 1.0, "action_mean": 0.0, "action_std": 1.0}
    return TransitionBuilder(index, ["cam_high", "cam_left_wrist"], unit, chunk_size=2)


def test_an_episode_whose_cameras_grew_after_prepare_is_named_before_reading(tmp_path):
    import resource

    folder = write_dataset(tmp_path / "eps", [5, 5])
    prepare_episodes(folder, progress=False)
    builder = _builder(load_episode_index(folder))
    assert builder.build(0, 1)["observations"]["images"].shape == (2, 24, 32, 3)
    _write_bomb(folder / "episode_1.hdf5", 5, shape=(4000, 4000))  # under the budget
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(DatasetFormatError) as info:
        builder.build(1, 0)
    message = str(info.value)
    assert str(folder / "episode_1.hdf5") in message and "prepare again" in message
    assert "/observations/images/cam_high has shape (5, 4000, 4000, 3)" in message
    assert "it was (5, 24, 32, 3) when the episodes were prepared" in message
    # refused from the declaration: not one 48 MB frame was read
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 40_000  # KiB


def test_a_camera_rewritten_as_float64_with_the_same_shape_is_named(tmp_path):
    """Same shape, other element type: refused from the declaration, naming both types
    (it was served as float64 frames before)."""
    import h5py  # when used, not at collection (see installed_or_skip in conftest.py)

    folder = write_dataset(tmp_path / "eps", [5, 5])
    prepare_episodes(folder, progress=False)
    index = load_episode_index(folder)
    assert index.frame_dtype(1, "observations/images/cam_high") == "|u1"
    with h5py.File(folder / "episode_1.hdf5", "a") as f:
        frames = f["observations/images/cam_high"][()]
        del f["observations/images/cam_high"]
        f.create_dataset("observations/images/cam_high", data=frames.astype(np.float64))
    builder = _builder(index)
    assert builder.build(0, 1)["observations"]["images"].dtype == np.uint8
    with pytest.raises(DatasetFormatError) as info:
        builder.build(1, 0)
    message = str(info.value)
    assert str(folder / "episode_1.hdf5") in message and "prepare again" in message
    assert "/observations/images/cam_high holds float64, but it held uint8" in message


def test_an_episode_whose_qpos_dimension_changed_is_named(tmp_path):
    folder = write_dataset(tmp_path / "eps", [5, 5])
    prepare_episodes(folder, progress=False)
    builder = _builder(load_episode_index(folder))
    write_episode(folder / "episode_1.hdf5", 5, episode_id=1, qpos_dim=6)  # was 4
    with pytest.raises(DatasetFormatError) as info:
        builder.build(1, 0)
    message = str(info.value)
    assert str(folder / "episode_1.hdf5") in message and "prepare again" in message
    assert "/observations/qpos has shape (5, 6), but it was (5, 4)" in message
