"""A worker's state travels as what changed since the last one; the trainer rebuilds it."""

from __future__ import annotations

import pickle

from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset
from energon_lite.loader.state_delta import UNCHANGED, decoded, unchanged_marked, with_unchanged
from energon_lite.testing import take


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
    for _ in range(5):
        chain.next()
        state = chain.save_state()
        sent, previous = unchanged_marked(sent, state), state
        # the phase's 4 pipelines travel, as msgpack bytes the trainer keeps undecoded
        assert sum(isinstance(source, bytes) for source in sent["sources"]) == 4
        assert sent["sources"].count(UNCHANGED) == 12
        assert len(pickle.dumps(sent)) < len(pickle.dumps(state)) / 2
        trainer = with_unchanged(trainer, sent)
        assert decoded(trainer) == state  # what the trainer keeps is the worker's whole state
        sent = previous


def test_chains_that_save_new_objects_travel_whole():
    before = {"type": "Blend", "sources": [{"type": "Reader", "next": 1}], "source": None}
    after = {"type": "Blend", "sources": [{"type": "Reader", "next": 1}]}
    assert unchanged_marked(before, after) == after
    assert with_unchanged(before, unchanged_marked(before, after)) == after


def test_workers_restarted_from_the_kept_states_continue(train_ds):
    """close() and iterate again: new workers start from the trainer's states, whose
    pipelines are partly still the bytes the workers sent."""

    def make():
        return get_savable_loader(
            get_train_dataset(
                train_ds,
                worker_config=WorkerConfig(0, 1, 2),
                batch_size=8,
                shuffle_buffer_size=10,
                max_samples_per_sequence=2,
                canonical_layout=(4, 4),
            )
        )

    whole = [b.__key__ for b in take(make(), 9)]
    parts = make()
    first = [b.__key__ for b in take(parts, 3)]
    assert any(
        isinstance(source, bytes) for worker in parts._states for source in worker["sources"]
    )
    parts.close()
    second = [b.__key__ for b in take(parts, 3)]
    parts.close()
    third = [b.__key__ for b in take(parts, 3)]
    assert first + second + third == whole
    assert [decoded(w) for w in parts._states] == parts.save_state_rank()["workers"]
