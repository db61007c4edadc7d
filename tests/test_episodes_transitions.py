"""Transitions: chunk fields vs brute force, images (raw/JPEG), depth, norm stats, reopen."""

from __future__ import annotations

import multiprocessing as mp
import pickle

import numpy as np
import pytest

from energon_lite.errors import ConfigError, FailureTracker, MediaDecodeError, TooManyFailuresError
from energon_lite.flavors.episodes.index import scan_episodes
from energon_lite.flavors.episodes.stats import compute_norm_stats
from energon_lite.flavors.episodes.transitions import TransitionBuilder, chunk_fields
from energon_lite.synth.episodes import pixel_value, write_dataset, write_episode

CAMS = ["cam_high", "cam_left_wrist"]
UNIT = {"qpos_mean": 0.0, "qpos_std": 1.0, "action_mean": 0.0, "action_std": 1.0}


def brute_force(length, start, chunk, r, gamma):
    """The Q-chunking recurrences, step by step, with the last frame terminal."""
    out = {k: np.zeros(chunk) for k in ("rewards", "masks", "valid", "terminals")}
    for i in range(chunk):
        k = start + i
        rew = r[k] if k < length else 0.0
        terminal = 1.0 if k >= length - 1 else 0.0
        if i == 0:
            out["rewards"][0], out["terminals"][0], out["masks"][0] = rew, terminal, 1 - terminal
            out["valid"][0] = 1.0
        else:
            out["rewards"][i] = out["rewards"][i - 1] + rew * gamma**i
            out["terminals"][i] = max(out["terminals"][i - 1], terminal)
            out["masks"][i] = min(out["masks"][i - 1], 1 - terminal)
            out["valid"][i] = 1.0 - out["terminals"][i - 1]
    return out


@pytest.mark.parametrize("length", [1, 2, 5, 9])
@pytest.mark.parametrize("chunk", [1, 3, 4])
def test_chunk_fields_match_q_chunking_recurrences(length, chunk):
    r = np.random.default_rng(length * 10 + chunk).normal(size=length)
    for start in range(length):  # start, middle and end of the episode
        got = chunk_fields(length, start, chunk, r, 0.9)
        want = brute_force(length, start, chunk, r, 0.9)
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, err_msg=f"{key} {start=}")


@pytest.mark.parametrize("images", ["raw", "jpeg", "jpeg_vlen"])
def test_transition_fields_padding_and_images(tmp_path, images):
    folder = write_dataset(tmp_path, [6, 1], [True, False], images=images, image_size=(8, 12))
    index = scan_episodes(folder)
    norm = {"qpos_mean": 1.0, "qpos_std": 2.0, "action_mean": 0.5, "action_std": 4.0}
    builder = TransitionBuilder(index, CAMS[::-1], norm, chunk_size=4, discount=0.5)
    for start, n_real in ((0, 4), (3, 3), (5, 1)):  # start, middle, end of episode 0
        tr = builder.build(0, start)
        assert tr["__restore_key__"] == ("Episode", 0, start)
        np.testing.assert_allclose(
            tr["observations"]["qpos"], (start + 0.01 * np.arange(4) - 1) / 2, rtol=1e-5
        )
        want = (start + np.arange(n_real)[:, None] + 0.5 + 0.01 * np.arange(4) - 0.5) / 4
        np.testing.assert_allclose(tr["actions"][:n_real], want, rtol=1e-5)
        assert tr["actions"].shape == (4, 4) and not tr["actions"][n_real:].any()
        assert tr["valid"].tolist() == [1.0] * n_real + [0.0] * (4 - n_real)
        last = 5 - start  # chunk index of the episode's last frame
        assert tr["terminals"].tolist() == [float(i >= last) for i in range(4)]
        assert tr["masks"].tolist() == [float(i < last) for i in range(4)]
        sparse = 0.5**last if last < 4 else 0.0  # success reward 1 on the last frame
        assert tr["final_reward"] == pytest.approx(sparse) and tr["is_positive"] is True
        ims = tr["observations"]["images"]
        assert ims.shape == (2, 8, 12, 3) and ims.dtype == np.uint8
        for c, cam_id in enumerate([1, 0]):  # camera_names order, reversed on purpose
            assert abs(int(ims[c].mean()) - pixel_value(start, cam_id)) <= 3
    tr = builder.build(1, 0)  # a length-1 negative episode: one real frame, terminal at once
    assert tr["valid"].tolist() == [1, 0, 0, 0] and tr["masks"].tolist() == [0, 0, 0, 0]
    assert tr["final_reward"] == 0.0 and tr["is_positive"] is False
    assert builder.fetch(("Episode", 0, 3))["__key__"] == "episode_0.hdf5/3"


def test_rewards_from_file_with_known_discount_and_depth(tmp_path):
    write_episode(tmp_path / "e.hdf5", 5, reward=[1, 2, 3, 4, 5], depth=True, image_size=(4, 4))
    builder = TransitionBuilder(
        scan_episodes(tmp_path), CAMS, UNIT, chunk_size=3, discount=0.5, include_depth=True,
        normalize_images=True,
    )  # fmt: skip
    tr = builder.build(0, 1)
    np.testing.assert_allclose(tr["rewards"], [2, 2 + 1.5, 2 + 1.5 + 1.0])
    assert tr["final_reward"] == pytest.approx(4.5)
    np.testing.assert_allclose(builder.build(0, 4)["rewards"], [5, 5, 5])
    depth = tr["observations"]["depth_images"]
    assert depth.shape == (2, 4, 4) and depth[0, 0, 0] == 1 and depth[1, 0, 0] == 101
    images = tr["observations"]["images"]
    assert images.dtype == np.float32 and images.max() <= 1.0


def test_norm_stats_match_numpy_over_all_frames(tmp_path):
    folder = write_dataset(tmp_path, [3, 7, 1])
    stats = compute_norm_stats(folder)
    assert set(stats) == {"qpos_mean", "qpos_std", "action_mean", "action_std", "example_qpos"}
    qpos = np.concatenate(
        [
            (1000.0 * e + np.arange(n))[:, None] + 0.01 * np.arange(4)
            for e, n in enumerate([3, 7, 1])
        ]
    )
    np.testing.assert_allclose(stats["qpos_mean"], qpos.mean(0), rtol=1e-5)
    np.testing.assert_allclose(stats["qpos_std"], qpos.std(0), rtol=1e-4)
    np.testing.assert_allclose(stats["action_mean"], qpos.mean(0) + 0.5, rtol=1e-5)
    write_dataset(tmp_path / "const", [4])
    assert compute_norm_stats(tmp_path / "const", episodes=[0])["qpos_std"].min() > 1.0
    one = compute_norm_stats(scan_episodes(tmp_path / "const"), min_std=5.0)
    assert one["qpos_std"].tolist() == [5.0] * 4  # clipped below at min_std


def test_bad_settings_and_bad_frames_raise_clear_errors(tmp_path):
    import h5py  # when used, not at collection (see installed_or_skip in conftest.py)

    write_episode(tmp_path / "e.hdf5", 3, images="jpeg")
    index = scan_episodes(tmp_path)
    with pytest.raises(ConfigError, match="chunk_size=0"):
        TransitionBuilder(index, CAMS, UNIT, chunk_size=0)
    with pytest.raises(ConfigError, match="action_std"):
        TransitionBuilder(index, CAMS, {"qpos_mean": 0, "qpos_std": 1, "action_mean": 0}, 2)
    with pytest.raises(ConfigError, match="qpos_mean"):
        TransitionBuilder(index, CAMS, {**UNIT, "qpos_mean": np.zeros(9)}, 2)
    with h5py.File(tmp_path / "e.hdf5", "r+") as f:
        f["observations/images/cam_high"][1] = 7  # corrupt JPEG bytes of frame 1
    builder = TransitionBuilder(index, CAMS, UNIT, chunk_size=2)
    with pytest.raises(MediaDecodeError, match=r"e\.hdf5: /observations/images/cam_high frame 1"):
        builder.build(0, 1)
    tracker = FailureTracker(1)
    assert builder.try_build(0, 1, tracker) is None and tracker.total == 1
    assert builder.try_build(0, 0, tracker) is not None and tracker.consecutive == 0
    with pytest.raises(TooManyFailuresError):
        builder.try_build(0, 1, FailureTracker(0))


def _child_read(builder, queue):
    import os

    reader = builder.reader
    before = len(reader._files)
    qpos = builder.build(0, 2)["observations"]["qpos"].tolist()
    queue.put((before, qpos, len(reader._files), reader._pid == os.getpid()))


def test_files_open_lazily_and_are_reopened_in_a_forked_child(tmp_path):
    write_dataset(tmp_path, [4])
    builder = TransitionBuilder(scan_episodes(tmp_path), CAMS, UNIT, chunk_size=2)
    assert len(builder.reader._files) == 0  # nothing opened before the first read
    builder.build(0, 0)
    assert len(builder.reader._files) == 1
    clone = pickle.loads(pickle.dumps(builder))
    assert len(clone.reader._files) == 0 and clone.build(0, 1)["__key__"] == "episode_0.hdf5/1"
    queue = mp.get_context("fork").Queue()
    child = mp.get_context("fork").Process(target=_child_read, args=(builder, queue))
    child.start()
    before, qpos, after, reopened = queue.get(timeout=30)
    child.join(30)
    assert before == 1 and after == 1 and reopened  # inherited handle dropped, own one opened
    assert builder.reader._pid != child.pid  # the parent kept its own
    np.testing.assert_allclose(qpos, 2 + 0.01 * np.arange(4), rtol=1e-6)
