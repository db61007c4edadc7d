"""The rank state: one typed record that writes the saved form and checks it, alone or a run's."""

from __future__ import annotations

import pickle
from dataclasses import replace
from pathlib import Path

import pytest

from energon_lite import StateError, WorkerConfig, get_savable_loader, get_train_dataset
from energon_lite.resume.rank_state import RankState, read_run
from energon_lite.testing import take


def _loader(path: Path, rank: int = 0, world_size: int = 1):
    dataset = get_train_dataset(
        path,
        worker_config=WorkerConfig(rank=rank, world_size=world_size, num_workers=0),
        batch_size=4,
        shuffle_buffer_size=8,
        max_samples_per_sequence=10,
    )
    return get_savable_loader(dataset)


def _run(path: Path, steps: int) -> list[dict]:
    states = []
    for rank in range(2):
        loader = _loader(path, rank, 2)
        take(loader, steps)
        states.append(loader.save_state_rank())
    return states


def test_the_saved_form_reads_back_whole(train_ds: Path) -> None:
    """Reading a saved state and writing it again gives the very same plain data: the
    record holds every field of the saved form, which it alone writes."""
    loader = _loader(train_ds)
    take(loader, 3)
    saved = loader.save_state_rank()
    state = RankState.read(pickle.loads(pickle.dumps(saved)))
    assert state.plain() == saved
    assert list(state.plain()) == list(saved)  # the same field order, digest last
    assert (state.epoch, state.in_pass, len(state.workers)) == (0, 3, 1)


def test_a_record_is_refused_naming_the_field(train_ds: Path) -> None:
    loader = _loader(train_ds)
    take(loader, 2)
    state = RankState.read(loader.save_state_rank())
    forged = {**state.plain(), "next_worker": 1}  # digest no longer matches
    with pytest.raises(StateError, match="does not match its digest"):
        RankState.read(forged)
    with pytest.raises(StateError, match="next_worker=1 outside"):
        RankState.read(replace(state, next_worker=1).plain())  # digest recomputed
    with pytest.raises(StateError, match="old rank 3: not an energon_lite loader state"):
        RankState.read({"type": "other"}, "old rank 3: ")


def test_a_run_is_read_together(train_ds: Path) -> None:
    states = _run(train_ds, 2)
    run = read_run(states)
    assert [state.rank for state in run.ranks] == [0, 1] and run.epoch == 0
    with pytest.raises(StateError, match="rank order"):
        read_run(states[::-1])
    with pytest.raises(StateError, match="world_size=2, but 1 states"):
        read_run(states[:1])
    later = replace(RankState.read(states[1]), epoch=1).plain()  # each alone is consistent
    with pytest.raises(StateError, match=r"different passes \[0, 1\]"):
        read_run([states[0], later])
