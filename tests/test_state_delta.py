"""A worker's state travels as what changed since the last one; the trainer rebuilds it."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset
from energon_lite.resume.state_delta import (
    PATCHED,
    UNCHANGED,
    is_patch,
    unchanged_marked,
    with_unchanged,
)
from energon_lite.state.compact import unpacked
from energon_lite.testing import assert_loader_resumes, take


def _two_workers(root: Path, **options: Any) -> Any:
    """A savable loader of ``root`` on 1 rank x 2 workers."""
    return get_savable_loader(
        get_train_dataset(root, worker_config=WorkerConfig(0, 1, 2), **options)
    )


def _level(state: dict, stage: str) -> dict:
    """The level of ``state`` saved by ``stage``, following ``source``."""
    while state["type"] != stage:
        state = state["source"]
    return state


def test_only_the_pipelines_a_batch_moved_travel(train_ds):
    """Canonical (4, 4) on 1 rank x 1 worker: a batch moves the 4 pipelines of its phase."""
    dataset = get_train_dataset(
        train_ds,
        worker_config=WorkerConfig(0, 1, 1),
        batch_size=8,
        shuffle_buffer_size=10,
        max_samples_per_sequence=2,  # every pipeline has slices: none ends
        canonical_layout=(4, 4),
    )
    chain = dataset.pipeline.build(dataset.worker_config.slot(0))
    chain.restore_state(None)
    for _ in range(4):  # every phase's pipelines started
        chain.next()
    sent = chain.save_state()
    trainer = with_unchanged(None, unchanged_marked(None, sent))  # the first travels whole
    before = pickle.loads(pickle.dumps(trainer))
    for _ in range(5):
        chain.next()
        state = chain.save_state()
        sent, previous = unchanged_marked(sent, state), state
        # the phase's 4 pipelines travel, as what changed in them
        assert sum(is_patch(source) for source in sent["sources"]) == 4
        assert sent["sources"].count(UNCHANGED) == 12
        assert len(pickle.dumps(sent)) < len(pickle.dumps(state)) / 4
        handed_out = trainer
        trainer = with_unchanged(trainer, sent)
        assert trainer == state  # what the trainer keeps is the worker's whole state
        assert handed_out == before  # and a state it kept before is not changed
        before = pickle.loads(pickle.dumps(trainer))
        sent = previous


def test_chains_that_save_new_objects_travel_whole():
    before = {"type": "Blend", "sources": [{"type": "Reader", "next": 1}], "source": None}
    after = {"type": "Blend", "sources": [{"type": "Reader", "next": 1}]}
    assert unchanged_marked(before, after) == after
    assert with_unchanged(before, unchanged_marked(before, after)) == after


def test_workers_restarted_from_the_kept_states_continue(train_ds):
    """close() and iterate again: new workers start from the trainer's states, rebuilt
    from what changed."""

    def make():
        return _two_workers(
            train_ds,
            batch_size=8,
            shuffle_buffer_size=10,
            max_samples_per_sequence=2,
            canonical_layout=(4, 4),
        )

    whole = [b.__key__ for b in take(make(), 9)]
    parts = make()
    first = [b.__key__ for b in take(parts, 3)]
    parts.close()
    second = [b.__key__ for b in take(parts, 3)]
    parts.close()
    third = [b.__key__ for b in take(parts, 3)]
    assert first + second + third == whole
    assert parts._position.workers == unpacked(parts.save_state_rank())["workers"]


def test_a_patch_rebuilds_the_new_state_and_keeps_the_old():
    keys = [["s", 0, 0, i, 0] for i in range(10)]
    old = {"type": "Buffer", "keys": keys, "rng": 3, "source": {"type": "Reader", "next": 1}}
    new = {**old, "keys": [*keys[:4], ["s", 0, 0, 99, 0], *keys[5:]], "rng": 4}
    sent = unchanged_marked(
        {"type": "Phases", "sources": [old]}, {"type": "Phases", "sources": [new]}
    )
    change = sent["sources"][0]
    assert is_patch(change) and set(change) == {"=patch", "keys", "rng"}
    rebuilt = with_unchanged({"type": "Phases", "sources": [old]}, pickle.loads(pickle.dumps(sent)))
    assert rebuilt["sources"][0] == new
    assert old["keys"][4] == ["s", 0, 0, 4, 0] and old["rng"] == 3
    # a value of another type, though equal, travels: True is not 1 in a saved state
    flag = unchanged_marked(
        {"type": "Phases", "sources": [{"done": 1}]},
        {"type": "Phases", "sources": [{"done": True}]},
    )
    assert with_unchanged({"sources": [{"done": 1}]}, flag)["sources"][0]["done"] is True


def test_a_plain_chains_shuffle_buffer_travels_as_the_keys_a_batch_changed(many_ds):
    """A plain chain (no canonical layout): a batch of 4 changes at most 8 of the buffer's 200
    keys, and only those travel; the trainer rebuilds the whole state."""
    dataset = get_train_dataset(
        many_ds,
        worker_config=WorkerConfig(0, 1, 1),
        batch_size=4,
        shuffle_buffer_size=200,
        max_samples_per_sequence=5,
    )
    chain = dataset.pipeline.build(dataset.worker_config.slot(0))
    chain.restore_state(None)
    chain.next()  # the buffer filled
    last = chain.save_state()
    trainer = with_unchanged(None, unchanged_marked(None, last))
    assert PATCHED not in _level(unchanged_marked(None, last), "ShuffleBuffer")  # first: whole
    before = pickle.loads(pickle.dumps(trainer))
    for _ in range(6):
        chain.next()
        state = chain.save_state()
        sent = pickle.loads(pickle.dumps(unchanged_marked(last, state)))
        buffer = _level(sent, "ShuffleBuffer")
        assert buffer[PATCHED] == ["keys"] and is_patch(buffer["keys"])
        assert 1 <= len(buffer["keys"]) - 1 <= 8  # the slots that hold other keys
        assert len(pickle.dumps(sent)) < len(pickle.dumps(state)) / 2
        handed_out, trainer = trainer, with_unchanged(trainer, sent)
        assert trainer == state
        assert handed_out == before  # a state handed out before is not changed
        before, last = pickle.loads(pickle.dumps(trainer)), state
    # a save with no batch between: the same keys, sent as unchanged
    again = unchanged_marked(last, chain.save_state())
    assert _level(again, "ShuffleBuffer")["keys"] == UNCHANGED
    assert with_unchanged(trainer, again) == last


def test_a_list_that_changed_length_travels_whole():
    old = {"type": "ShuffleBuffer", "keys": [["s", 0, 0, i, 0] for i in range(200)], "rng": 1}
    new = {**old, "keys": [*old["keys"], ["s", 0, 0, 200, 0]], "rng": 2}
    sent = unchanged_marked(old, new)
    assert PATCHED not in sent and sent["keys"] is new["keys"]
    assert with_unchanged(old, sent) == new


def test_a_change_without_a_list_before_is_a_bug_named():
    new = {"type": "ShuffleBuffer", "keys": [["s", 0, 0, i, 0] for i in range(200)], "rng": 2}
    sent = unchanged_marked({**new, "keys": list(new["keys"])}, new)
    with pytest.raises(RuntimeError, match="ShuffleBuffer state's 'keys' as a change"):
        with_unchanged({"type": "ShuffleBuffer", "rng": 1}, sent)


def test_plain_loaders_with_large_buffers_resume_exactly(many_ds):
    """Through worker processes: the trainer's states, rebuilt from the buffer keys that
    changed (150 per worker), resume the stream exactly at every save point."""

    def make():
        return _two_workers(
            many_ds, batch_size=3, shuffle_buffer_size=150, max_samples_per_sequence=5
        )

    assert_loader_resumes(make, 24, [0, 5, 13, 23])


def _scribble(value: Any) -> None:
    """Change every list and dict inside ``value`` in place."""
    if isinstance(value, list):
        for item in value:
            _scribble(item)
        value.append("scribbled")
    elif isinstance(value, dict):
        for item in value.values():
            _scribble(item)
        value["scribbled"] = True


def test_a_state_handed_out_is_the_callers_to_change(many_ds):
    """The trainer's states share the keys a batch did not change; a caller that edits the
    state it got does not edit the next one."""
    loader = _two_workers(
        many_ds, batch_size=3, shuffle_buffer_size=150, max_samples_per_sequence=5
    )
    take(loader, 4)  # every worker's state has travelled as changes
    mine = loader.save_state_rank()
    reference = pickle.loads(pickle.dumps(mine))
    _scribble(mine)
    assert loader.save_state_rank() == reference
    loader.close()


def test_a_readers_leftover_travels_once_after_an_elastic_restore(train_ds):
    """After a restore onto another layout a reader owes the old layout's buffered samples
    first; its list of them is sent with the first batch only."""
    old = _two_workers(train_ds, batch_size=3, shuffle_buffer_size=25, max_samples_per_sequence=5)
    take(old, 4)
    states = [old.save_state_rank()]
    old.close()
    new = get_savable_loader(
        get_train_dataset(
            train_ds,
            worker_config=WorkerConfig(0, 1, 1),
            batch_size=3,
            shuffle_buffer_size=25,
            max_samples_per_sequence=5,
        )
    )
    new.restore_state_global(states)
    chain = new.dataset.pipeline.build(new.dataset.worker_config.slot(0))
    chain.restore_state(unpacked(new.save_state_rank())["workers"][0])
    chain.next()
    last = chain.save_state()
    left = _level(last, "Reader")["left"]
    assert len(left["keys"]) > 8  # the old buffers' samples, still owed (a long list)
    trainer = pickle.loads(pickle.dumps(last))
    chain.next()
    state = chain.save_state()
    sent = pickle.loads(pickle.dumps(unchanged_marked(last, state)))
    reader = _level(sent, "Reader")
    assert "left" in reader[PATCHED] and is_patch(reader["left"])
    assert "keys" not in reader["left"]  # the same list: not sent again
    assert with_unchanged(trainer, sent) == state


def test_a_state_with_nothing_marked_travels_as_saved():
    """Nothing changed in a long list, nothing marked: the worker sends the state it saved,
    and the trainer keeps what it received. A blend's readers travel as saved too: many
    small states cost more to compare than to send."""
    readers = [
        {"type": "Reader", "next": i, "left": {"keys": [["s", 0, 0, i, 0]] * 9}} for i in range(3)
    ]
    old = {"type": "WeightedBlend", "rng": 1, "sources": readers}
    new = {"type": "WeightedBlend", "rng": 2, "sources": [dict(reader) for reader in readers]}
    assert unchanged_marked(old, new) is new
    assert with_unchanged(old, new) is new
    # a buffer of 128 keys or fewer travels as saved, even when one of them changed: so
    # short, pickling it costs less than comparing it
    short = {"type": "ShuffleBuffer", "keys": [["s", 0, 0, i, 0] for i in range(128)], "rng": 1}
    again = {**short, "keys": [*short["keys"][:127], ["s", 0, 0, 999, 0]], "rng": 2}
    assert unchanged_marked(short, again) is again
