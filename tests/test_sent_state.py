"""A worker's state travels as bytes; the trainer decodes them only when the states are read."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset
from energon_lite.resume.sent_state import (
    MAX_CHANGES,
    SentStates,
    StateSender,
    encoded,
    is_whole,
)
from energon_lite.resume.state_delta import unchanged_marked
from energon_lite.testing import assert_loader_resumes, take


def _chain_states(root: Path, batches: int, buffer: int) -> list[Any]:
    """The states a 1 x 1 chain of ``root`` saves after each of its first ``batches``."""
    dataset = get_train_dataset(
        root,
        worker_config=WorkerConfig(0, 1, 1),
        batch_size=4,
        shuffle_buffer_size=buffer,
        max_samples_per_sequence=5,
    )
    chain = dataset.pipeline.build(dataset.worker_config.slot(0))
    chain.restore_state(None)
    states = []
    for _ in range(batches):
        chain.next()
        states.append(chain.save_state())
    return states


def _copy(state: Any) -> Any:
    return pickle.loads(pickle.dumps(state))


def test_changes_are_kept_until_read_then_rebuild_every_state(many_ds):
    """A 200-key buffer travels as changes: the trainer keeps them as bytes, and reading the
    states at any step gives the state saved at that step; a whole state is sent again once
    the changes add up to its size, and drops the changes kept before it."""
    states = _chain_states(many_ds, 60, 200)
    expected = [_copy(state) for state in states]  # before anything could touch them
    send, kept = StateSender(), SentStates([None])
    sizes = []  # (whole, bytes) of what each batch sent
    for step, state in enumerate(states):
        sent = send(state)
        sizes.append((is_whole(sent), len(sent)))
        before = kept.pending(0)
        kept.received(0, sent)
        assert kept.pending(0) == (1 if is_whole(sent) else before + 1)
        if step % 7 == 3:
            assert kept.states() == [expected[step]]
            assert kept.pending(0) == 0
    assert kept.states() == [expected[-1]]
    wholes = [step for step, (whole, _) in enumerate(sizes) if whole]
    assert wholes[0] == 0 and len(wholes) >= 2 and len(wholes) < len(states) / 2
    # changes are sent only while those since the last whole state are smaller than it
    whole_bytes = changes_bytes = 0
    for whole, size in sizes:
        if whole:
            whole_bytes, changes_bytes = size, 0
        else:
            assert changes_bytes < whole_bytes
            changes_bytes += size


def test_a_small_buffer_travels_whole_and_only_the_last_is_kept(train_ds):
    """Buffers of 128 keys or fewer travel whole: the trainer holds one state per worker."""
    states = _chain_states(train_ds, 20, 16)
    send, kept = StateSender(), SentStates([None, None])
    for step, state in enumerate(states):
        kept.received(step % 2, send(state))
        assert kept.pending(step % 2) == 1
    assert kept.states() == [_copy(states[-2]), _copy(states[-1])]


def test_a_worker_sends_its_state_whole_at_least_every_max_changes_plus_one():
    """Changes much smaller than the state: whole again after MAX_CHANGES changes."""
    keys = [["s", 0, 0, i, 0] for i in range(20_000)]
    send, wholes = StateSender(), []
    for step in range(2 * MAX_CHANGES + 3):
        keys = [*keys[:-1], ["s", 0, 0, 20_000 + step, 0]]
        sent = send({"type": "ShuffleBuffer", "keys": keys, "rng": step})
        wholes.append(is_whole(sent))
    assert [i for i, whole in enumerate(wholes) if whole] == [
        0,
        MAX_CHANGES + 1,
        2 * MAX_CHANGES + 2,
    ]


def test_the_trainer_decodes_a_list_of_changes_past_the_bound():
    """A worker that only ever sends changes: the trainer applies them itself once it holds
    MAX_CHANGES + 1 of them, so its memory stays flat."""
    keys = [["s", 0, 0, i, 0] for i in range(200)]
    last = {"type": "ShuffleBuffer", "keys": keys, "rng": 0}
    kept = SentStates([None])
    kept.received(0, encoded(last, whole=True))
    for step in range(1, 2 * MAX_CHANGES + 10):
        state = {**last, "keys": [*last["keys"][:-1], ["s", 0, 0, 1000 + step, 0]], "rng": step}
        kept.received(0, encoded(unchanged_marked(last, state), whole=False))
        assert 1 <= kept.pending(0) <= MAX_CHANGES + 1
        last = state
    assert kept.states() == [_copy(last)]


def test_a_state_that_did_not_travel_is_kept_as_it_is():
    """No worker processes: the chain's state is received as the object itself."""
    kept = SentStates([None])
    state = {"type": "Reader", "next": 3}
    kept.received(0, encoded({"type": "Reader", "next": 2}, whole=True))
    kept.received(0, state)
    assert kept.pending(0) == 0 and kept.states()[0] is state


def _two_workers(root: Path) -> Any:
    """A savable loader of ``root`` on 1 rank x 2 workers, buffers of 150 keys."""
    return get_savable_loader(
        get_train_dataset(
            root,
            worker_config=WorkerConfig(0, 1, 2),
            batch_size=3,
            shuffle_buffer_size=150,
            max_samples_per_sequence=5,
        )
    )


def test_the_loader_decodes_only_when_a_save_asks(many_ds):
    """Through worker processes: between saves the trainer holds the changes as sent;
    a save decodes them, and the loader resumes exactly from the states it rebuilt."""
    loader = _two_workers(many_ds)
    take(loader, 8)
    sent = loader._position._sent
    assert [sent.pending(worker) for worker in (0, 1)] == [4, 4]  # a whole state and 3 changes
    loader.save_state_rank()
    assert [sent.pending(worker) for worker in (0, 1)] == [0, 0]
    loader.close()
    assert_loader_resumes(lambda: _two_workers(many_ds), 30, [0, 7, 19, 29])
