"""A Parquet folder (written by ``datasets``, prepared in place) through everything the tar path
has: a metadataset blending it with a tar set (a weight schedule, stratified batches), exact
resume at 0 and 2 workers, elastic resume onto another layout and the canonical layout."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import installed_or_skip

from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset, prepare_dataset
from energon_lite.cli.main import main
from energon_lite.stages.mix import largest_remainder
from energon_lite.synth.shards import write_captioning_shards
from energon_lite.synth.tables import caption_rows, write_hf_parquet
from energon_lite.testing import assert_loader_resumes, take

installed_or_skip("pyarrow", "datasets")

HUB, WEB = 48, 40  # samples of the Parquet set and of the tar set


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mixed")
    write_hf_parquet(root / "hub", caption_rows(HUB), files=3, rows_per_group=5)
    field_map = json.dumps({"image": "image", "caption": "caption"})
    main(
        [
            "prepare",
            "--sample-type",
            "CaptioningSample",
            "--field-map",
            field_map,
            str(root / "hub"),
        ]
    )
    write_captioning_shards(root / "web", WEB, 10, image_size=(8, 8), key_format="web{:04d}")
    prepare_dataset(
        root / "web",
        split_ratio=[("train", 1)],
        sample_type="CaptioningSample",
        field_map={"image": "jpg", "caption": "txt"},
        progress=False,
    )
    (root / "ramp.yaml").write_text(
        "__module__: energon_lite\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        "    batch_composition: stratified\n    blend:\n"
        "      - path: ./hub\n        weight: {schedule: [[0, 9], [10, 1]], interpolate: linear}\n"
        "      - path: ./web\n        weight: {schedule: [[0, 1], [10, 9]], interpolate: linear}\n"
    )
    return root


def _loader(path: Path, workers: int = 2, rank: int = 0, world: int = 1, **options: Any):
    options.setdefault("shuffle_buffer_size", 8)
    dataset = get_train_dataset(
        path,
        worker_config=WorkerConfig(rank, world, workers),
        batch_size=options.pop("batch_size", 10),
        max_samples_per_sequence=4,
        **options,
    )
    return get_savable_loader(dataset)


def _hub(key: str) -> bool:
    return key.startswith("data/train-")


def test_a_blend_of_parquet_and_tar_follows_its_schedule_in_stratified_batches(data):
    loader = _loader(data / "ramp.yaml")
    for step, batch in enumerate(take(loader, 14)):
        share = (9 - 8 * min(step, 10) / 10) / 10  # the hub's weight over the sum (10)
        hub = largest_remainder(10, [share, 1 - share])[0]
        assert sum(map(_hub, batch.__key__)) == hub, step
    loader.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_the_blend_resumes_exactly(data, workers):
    reference = assert_loader_resumes(lambda: _loader(data / "ramp.yaml", workers), 9, [0, 4, 7])
    assert any(_hub(k) for batch in reference for k in batch[0])


@pytest.mark.parametrize("workers", [0, 2])
def test_a_parquet_set_alone_resumes_exactly_over_its_epoch(data, workers):
    reference = assert_loader_resumes(
        lambda: _loader(data / "hub", workers, batch_size=4, repeat=False), 12, [0, 5, 11]
    )
    keys = [k for batch in reference for k in batch[0]]
    assert sorted(keys) == sorted(
        f"data/train-{f:05d}-of-00003.parquet/{r}" for f in range(3) for r in range(16)
    )


def test_elastic_resume_of_a_parquet_set_delivers_the_epoch_once(data):
    delivered, states = [], []
    for rank in range(2):
        old = _loader(data / "hub", workers=2, rank=rank, world=2, batch_size=3, repeat=False)
        delivered += [k for batch in take(old, 3) for k in batch.__key__]
        states.append(old.save_state_rank())
        old.close()
    new = _loader(data / "hub", workers=2, batch_size=3, repeat=False)
    new.restore_state_global(states)
    rest = [k for batch in new for k in batch.__key__]
    new.close()
    assert Counter(delivered + rest) == Counter(
        f"data/train-{f:05d}-of-00003.parquet/{r}" for f in range(3) for r in range(16)
    )


def test_the_canonical_layout_gives_a_parquet_set_the_same_batches_on_two_layouts(data):
    def run(world: int, workers: int) -> list[list[str]]:
        loaders = [
            _loader(data / "hub", workers, rank, world, batch_size=8 // world,
                    canonical_layout=(2, 2))
            for rank in range(world)
        ]  # fmt: skip
        per_rank = [[sorted(b.__key__) for b in take(one, 6)] for one in loaders]
        for one in loaders:
            one.close()
        return [sorted(k for rank in per_rank for k in rank[step]) for step in range(6)]

    assert run(1, 2) == run(2, 1)
