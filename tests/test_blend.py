"""The blend stages (weighted, epochized, concat) over real Readers of real prepared datasets: weights, quotas, concat, resume."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from conftest import energons_loader

import energon_lite as el
from energon_lite import StateError, prepare_dataset
from energon_lite.resume.levels import walk_states
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.stages.blend_epochized import EpochizedBlend
from energon_lite.stages.blend_weighted import WeightedBlend
from energon_lite.stages.concat import Concat
from energon_lite.stages.reader import Reader
from energon_lite.state.restore_key import SampleKey
from energon_lite.synth.shards import write_captioning_shards
from energon_lite.testing import assert_stage_resumes, take


def _prepared(root: Path, name: str, count: int, per_shard: int) -> PreparedDataset:
    write_captioning_shards(
        root / name, count, per_shard, image_size=(8, 8), key_format=name + "{:04d}"
    )
    prepare_dataset(
        root / name,
        split_ratio=[("train", 1)],
        sample_type="CaptioningSample",
        field_map={"image": "jpg", "caption": "txt"},
        progress=False,
    )
    return PreparedDataset(root / name, "train")


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, PreparedDataset]:
    """a: 60 samples, b: 20, c: 21 in shards of 7 (slices of 5 and 2: uneven worker shares)."""
    root = tmp_path_factory.mktemp("blend")
    return {
        "a": _prepared(root, "a", 60, 20),
        "b": _prepared(root, "b", 20, 10),
        "c": _prepared(root, "c", 21, 7),
    }


def _readers(
    data: list[PreparedDataset], worker: int = 0, workers: int = 1, *, repeat: bool, shuffle=True
) -> list[Reader]:
    return [
        Reader(
            ds,
            leaf_id=i,
            seed=7,
            worker_index=worker,
            num_workers=workers,
            max_samples_per_sequence=5,
            shuffle=shuffle,
            repeat=repeat,
            open_slices=2,
        )
        for i, ds in enumerate(data)
    ]


def _source(sample: dict) -> str:
    return sample["__key__"][0]


def test_weighted_frequencies_match_weights(datasets):
    # 3:1 over 4,000 draws: a ~ Binomial(4000, 0.75), sd = 27.4; allow 4 sd (110).
    blend = WeightedBlend(
        _readers([datasets["a"], datasets["b"]], repeat=True), [3, 1], seed=7, global_worker_id=0
    )
    counts = Counter(_source(s) for s in take(blend, 4000))
    assert abs(counts["a"] - 3000) <= 110, counts
    assert counts["a"] + counts["b"] == 4000


def test_weighted_drops_sources_that_end(datasets):
    blend = WeightedBlend(
        _readers([datasets["a"], datasets["b"]], repeat=False), [1, 1], seed=7, global_worker_id=0
    )
    keys = [s["__key__"] for s in blend]
    assert len(keys) == len(set(keys)) == 80


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize(
    ("names", "reps", "expected"),
    [(("a", "b"), (2, 0.5), {"a": 120, "b": 10}), (("a", "c"), (1.5, 0.5), {"a": 90, "c": 10})],
)
def test_epochized_exact_quotas_are_exact_across_workers(datasets, workers, names, reps, expected):
    """``rounding="exact"`` (the rounding of states saved before it was recorded): the
    fraction's shares sum to exactly ``floor(f * N)`` over all workers."""
    data = [datasets[n] for n in names]
    keys = []
    for worker in range(workers):
        blend = EpochizedBlend(
            _readers(data, worker, workers, repeat=False),
            reps,
            7,
            worker,
            repeat=False,
            rounding="exact",
        )
        keys += [s["__key__"] for s in blend]
    assert Counter(k[0] for k in keys) == expected
    per_sample = Counter(keys)
    whole = int(reps[0])
    assert all(whole <= per_sample[k] <= whole + 1 for k in per_sample if k[0] == "a")
    assert all(per_sample[k] == 1 for k in per_sample if k[0] != "a")


@pytest.mark.parametrize(("workers", "c_total"), [(1, 10), (2, 5 + 5), (3, 3 + 3 + 3)])
def test_epochized_rounds_the_fraction_down_per_worker(datasets, workers, c_total):
    """Fresh runs round as Energon's ``RepeatDataset``: each worker emits ``floor(f * n)`` of
    its own ``n`` samples of the fractional pass (c's 21 samples are dealt 21, 11 + 10 or
    7 + 7 + 7, so the epoch holds 10, 10 or 9 of them, not always ``floor(0.5 * 21)``)."""
    data = [datasets["a"], datasets["c"]]
    totals: Counter = Counter()
    for worker in range(workers):
        readers = _readers(data, worker, workers, repeat=False)
        a_owned = 60 // workers  # a: 60 samples in shards of 20, even shares
        c_owned = int(readers[1].samples_per_worker(0)[worker])
        mine = Counter(
            _source(s) for s in EpochizedBlend(readers, (1.5, 0.5), 7, worker, repeat=False)
        )
        assert mine == {"a": a_owned + a_owned // 2, "c": c_owned // 2}
        totals += mine
    assert totals == {"a": 90, "c": c_total}


def test_epochized_state_without_rounding_keeps_the_exact_rounding(datasets):
    """A state saved before the rounding was recorded (no ``rounding`` field) goes on with
    the exact rounding of its run, in this epoch and the next, in a blend whose fresh runs
    round per worker; a fresh run's state records ``per_worker``."""
    data = [datasets["a"], datasets["c"]]

    def blend(rounding: str = "per_worker") -> EpochizedBlend:
        readers = _readers(data, 0, 3, repeat=False)  # c: 7 samples, 3.5 -> 3 or 4
        return EpochizedBlend(readers, (1.5, 0.5), 7, 0, rounding=rounding)

    old = blend("exact")
    old.restore_state(None)
    take(old, 5)
    state = old.save_state()
    assert "rounding" not in state  # the shape states had before the field
    expected = take(old, 60)
    resumed = blend()
    resumed.restore_state(state)
    assert [s["__key__"] for s in take(resumed, 60)] == [s["__key__"] for s in expected]
    assert "rounding" not in resumed.save_state()
    fresh = blend()
    fresh.restore_state(None)
    assert fresh.save_state()["rounding"] == "per_worker"


def test_epochized_repeats_with_a_new_fraction_each_epoch(datasets):
    data = [datasets["a"], datasets["b"]]
    blend = EpochizedBlend(_readers(data, repeat=False), [2, 0.5], 7, 0, repeat=True)
    first, second = take(blend, 130), take(blend, 130)
    for epoch in (first, second):
        assert Counter(_source(s) for s in epoch) == {"a": 120, "b": 10}
    halves = [{s["__key__"] for s in epoch if _source(s) == "b"} for epoch in (first, second)]
    assert halves[0] != halves[1]
    assert {s["__restore_key__"].epoch for s in first if _source(s) == "a"} == {0, 1}
    assert {s["__restore_key__"].epoch for s in second if _source(s) == "a"} == {2, 3}


def test_concat_yields_sources_in_order(datasets):
    data = [datasets["b"], datasets["c"]]
    blend = Concat(_readers(data, repeat=False, shuffle=False))
    keys = [s["__key__"] for s in blend]
    assert keys == [f"b{i:04d}" for i in range(20)] + [f"c{i:04d}" for i in range(21)]


def test_weighted_resumes_exactly(datasets):
    data = [datasets["a"], datasets["c"]]
    assert_stage_resumes(
        lambda: WeightedBlend(_readers(data, 1, 2, repeat=True), [3, 1], 7, 1), 150, every=7
    )


def test_epochized_resumes_exactly_across_epoch_boundaries(datasets):
    data = [datasets["a"], datasets["c"]]
    reference = assert_stage_resumes(
        lambda: EpochizedBlend(_readers(data, 1, 2, repeat=False), [1.5, 0.5], 7, 1), 120, every=3
    )
    assert len(reference) == 120


def test_concat_resumes_exactly(datasets):
    data = [datasets["b"], datasets["c"]]
    assert_stage_resumes(lambda: Concat(_readers(data, repeat=False, shuffle=False)), None)


def test_fetch_dispatches_by_leaf_and_rejects_foreign_keys(datasets):
    blend = WeightedBlend(
        _readers([datasets["a"], datasets["b"]], repeat=True), [1, 1], seed=7, global_worker_id=0
    )
    samples = take(blend, 20)
    for sample in samples:
        assert blend.fetch(sample["__restore_key__"])["__key__"] == sample["__key__"]
    with pytest.raises(StateError, match="names no leaf of this blend"):
        blend.fetch(SampleKey(5, 0, 0, 0))


def test_state_of_another_mode_is_refused(datasets):
    data = [datasets["a"], datasets["b"]]
    weighted = WeightedBlend(_readers(data, repeat=True), [1, 1], 7, 0)
    epochized = EpochizedBlend(_readers(data, repeat=False), [1, 1], 7, 0)
    with pytest.raises(StateError, match="belongs to stage 'WeightedBlend', not 'EpochizedBlend'"):
        epochized.restore_state(weighted.save_state())
    with pytest.raises(StateError, match="2 sources, this stage has 1"):
        WeightedBlend(_readers(data[:1], repeat=True), [1], 7, 0).restore_state(
            weighted.save_state()
        )


NESTED = """__module__: megatron.energon
__class__: MetadatasetV2
splits:
  train:
    blend:
      - weight: 4
        path: {a}
      - weight: 1
        path: inner.yaml
"""
INNER = """__module__: megatron.energon
__class__: MetadatasetV2
splits:
  train:
    blend:
      - weight: 1
        path: {b}
      - weight: 3
        path: {c}
"""


def _nested_loader(lib, root: Path, workers: int, stream: str | None = None):
    wc = lib.WorkerConfig(rank=1, world_size=2, num_workers=workers, seed_offset=3)
    dataset = lib.get_train_dataset(
        root / "nested.yaml",
        worker_config=wc,
        batch_size=10,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
    )
    if stream is not None:  # "counter": a loader of the version before the field
        dataset.pipeline.options.blend_stream = stream
    return lib.get_savable_loader(dataset)


@pytest.fixture(scope="module")
def nested(datasets, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("nested")
    paths = {name: datasets[name].root for name in "abc"}
    for name, text in (("nested.yaml", NESTED), ("inner.yaml", INNER)):
        (root / name).write_text(text.format(**{k: str(v) for k, v in paths.items()}))
    return root


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.usefixtures("collector_spared")  # Energon collects garbage
def test_metadataset_blend_draws_as_energon(nested, workers):
    """A metadataset's weighted blend draws as Energon's BlendDataset (its worker stream and
    float32 cumulative weights): the same weights give the same per-source counts, batch by
    batch (megatron.energon as the oracle)."""
    energon = pytest.importorskip("megatron.energon")

    def counts(lib) -> list[Counter]:
        with energons_loader(_nested_loader(lib, nested, workers)) as loader:
            return [Counter(k[0] for k in batch.__key__) for _, batch in zip(range(60), loader)]

    ours = counts(el)
    assert ours == counts(energon)
    total = sum(ours, Counter())
    assert total["a"] > total["c"] > total["b"]  # 0.8, 0.15, 0.05 of 600


@pytest.mark.usefixtures("collector_spared")  # Energon collects garbage
def test_blend_state_without_stream_keeps_the_counter_stream(nested):
    """A state saved before the stream was recorded goes on with the counter stream it was
    drawn from; a fresh run's state records ``stream: energon``."""
    old = _nested_loader(el, nested, 2, stream="counter")
    take(iter(old), 7)
    state = old.save_state_rank()
    levels = [
        lvl for w in state["workers"] for lvl in walk_states(w) if lvl["type"] == "WeightedBlend"
    ]
    assert levels and all("stream" not in lvl for lvl in levels)
    expected = [batch.__key__ for batch in take(iter(old), 20)]
    resumed = _nested_loader(el, nested, 2)
    resumed.restore_state_rank(state)
    assert [batch.__key__ for batch in take(iter(resumed), 20)] == expected
    fresh = _nested_loader(el, nested, 2)
    take(iter(fresh), 2)  # one batch of each worker
    levels = [
        lvl
        for w in fresh.save_state_rank()["workers"]
        for lvl in walk_states(w)
        if lvl["type"] == "WeightedBlend"
    ]
    assert [lvl["stream"] for lvl in levels] == ["energon", "energon"]
