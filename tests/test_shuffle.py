"""ShuffleBuffer: a permutation of its source, keys-only state, exact resume."""

from __future__ import annotations

from pathlib import Path

import pytest

from energon_lite.errors import ConfigError, StateError
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.stages.shuffle import ShuffleBuffer
from energon_lite.state.codec import encode_state
from energon_lite.testing import assert_stage_resumes, make_reader, take


def _chain(ds: PreparedDataset, size: int = 10, repeat: bool = False) -> ShuffleBuffer:
    reader = make_reader(
        ds,
        seed=1,
        max_samples_per_sequence=20,
        shuffle=False,
        repeat=repeat,
        open_slices=1,
        shuffle_over_epochs_multiplier=None,
    )
    return ShuffleBuffer(reader, size, 1, 0)


def test_permutes_without_loss(train_ds: Path) -> None:
    ds = PreparedDataset(train_ds, "train")
    keys = [s["__key__"] for s in _chain(ds)]
    assert sorted(keys) == [f"{i:06d}" for i in range(120)] and keys != sorted(keys)
    # a sample moves at most about the buffer size ahead of its source position
    assert all(int(k) <= i + 10 for i, k in enumerate(keys))


def test_state_is_restore_keys_and_resume_is_exact(train_ds: Path) -> None:
    ds = PreparedDataset(train_ds, "train")
    chain = _chain(ds, 25, repeat=True)
    take(chain, 40)
    state = chain.save_state()
    assert len(state["keys"]) == 24 and state["keys"][0][0] == "s"
    assert len(encode_state(state)) < 25 * 24 + 200  # a few bytes per buffered sample, no data
    assert_stage_resumes(lambda: _chain(ds, 25, repeat=True), 200, every=9)
    assert_stage_resumes(lambda: _chain(ds, 7))


def test_bad_size_and_foreign_state(train_ds: Path) -> None:
    ds = PreparedDataset(train_ds, "train")
    with pytest.raises(
        ConfigError, match=r"size=0 for the shuffle buffer; set shuffle_buffer_size >= 1 or None"
    ):
        _chain(ds, 0)
    big = _chain(ds, 30)
    take(big, 5)
    with pytest.raises(StateError, match="state holds 29 keys but the buffer size is 10"):
        _chain(ds, 10).restore_state(big.save_state())
