"""A worker's state travels as what changed since the last one; the trainer rebuilds it."""

from __future__ import annotations

import pickle

from energon_lite import WorkerConfig, get_train_dataset
from energon_lite.loader.state_delta import UNCHANGED, unchanged_marked, with_unchanged


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
    sent = trainer = chain.save_state()  # the first state travels whole
    for _ in range(5):
        chain.next()
        state = chain.save_state()
        sent, previous = unchanged_marked(sent, state), state
        assert sum(isinstance(source, dict) for source in sent["sources"]) == 4  # the phase's
        assert sent["sources"].count(UNCHANGED) == 12
        assert len(pickle.dumps(sent)) < len(pickle.dumps(state)) / 2
        trainer = with_unchanged(trainer, sent)
        assert trainer == state  # what the trainer keeps is the worker's whole state
        sent = previous


def test_chains_that_save_new_objects_travel_whole():
    before = {"type": "Blend", "sources": [{"type": "Reader", "next": 1}], "source": None}
    after = {"type": "Blend", "sources": [{"type": "Reader", "next": 1}]}
    assert unchanged_marked(before, after) == after
    assert with_unchanged(before, unchanged_marked(before, after)) == after
