"""JSONL files and meta lists as datasets: cooked samples, metadataset leaves, ranks, resume."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from energon_lite import (
    Cooker,
    DatasetFormatError,
    DefaultTaskEncoder,
    Sample,
    WorkerConfig,
    basic_sample_keys,
    get_loader,
    get_savable_loader,
    get_train_dataset,
    get_val_dataset,
)
from energon_lite.flavors.jsonl import prepare_lines
from energon_lite.synth.lines import write_caption_jsonl, write_images, write_meta_list
from energon_lite.testing import assert_loader_resumes


@dataclass
class TextSample_(Sample):
    idx: int = 0
    text: str = ""
    source: str = ""


def cook_text(sample: dict) -> TextSample_:
    flavor = (sample.get("__subflavors__") or {}).get("ds", "")
    return TextSample_(
        **basic_sample_keys(sample),
        idx=sample["json"]["idx"],
        text=sample["json"]["caption"],
        source=flavor,
    )


class TextEncoder(DefaultTaskEncoder):
    cookers = (Cooker(cook_text),)


def _jsonl(folder: Path, name: str, count: int) -> Path:
    path = write_caption_jsonl(folder / name, count)
    prepare_lines(path, progress=False)
    return path


@pytest.fixture(scope="module")
def lines(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("jsonl")
    for name, count in (("ds1.jsonl", 55), ("ds2.jsonl", 30), ("ds3.jsonl", 20)):
        _jsonl(folder, name, count)
    (folder / "blend.yaml").write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        "      - {path: ds1.jsonl, weight: 1, subflavors: {ds: one}}\n"
        "      - {path: ds2.jsonl, weight: 1, subflavors: {ds: two}, subset: {range: [0%, 50%]}}\n"
    )
    (folder / "epochized.yaml").write_text(
        "__module__: energon_lite\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        "    blend_epochized:\n"
        "      - {path: ds1.jsonl, repetitions: 2, subflavors: {ds: one}}\n"
        "      - {path: ds3.jsonl, repetitions: 0.5, subflavors: {ds: three}}\n"
    )
    return folder


def _train(path: Path, workers: int = 0, **kwargs: object):
    return get_train_dataset(
        path,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=workers, seed_offset=42),
        batch_size=kwargs.pop("batch_size", 1),
        shuffle_buffer_size=kwargs.pop("shuffle_buffer_size", None),
        max_samples_per_sequence=kwargs.pop("max_samples_per_sequence", None),
        task_encoder=TextEncoder(),
        **kwargs,
    )


def test_every_line_once_per_epoch(lines: Path) -> None:
    dataset = _train(lines / "ds1.jsonl")
    assert len(dataset) == 55
    seen = [i for _, batch in zip(range(55 * 4), get_loader(dataset)) for i in batch.idx]
    for epoch in range(4):
        assert sorted(seen[epoch * 55 : (epoch + 1) * 55]) == list(range(55))
    assert seen[:55] != list(range(55))  # shuffled


def test_cooked_samples_carry_key_sources_and_text(lines: Path) -> None:
    batch = next(iter(get_loader(_train(lines / "ds1.jsonl"))))
    idx = int(batch.idx[0])
    assert batch.__key__ == [str(idx)]
    assert batch.text[0].startswith(f"sample {idx}:")
    (source,) = batch.__sources__
    assert source.shard_name == "ds1.jsonl" and source.index == idx
    assert source.file_names == (f"{idx}.json",)


def test_blend_with_subflavors_and_subset(lines: Path) -> None:
    batches = get_loader(_train(lines / "blend.yaml", batch_size=5))
    pairs = [(s, i) for _, b in zip(range(60), batches) for s, i in zip(b.source, b.idx)]
    count = Counter(s for s, _ in pairs)
    assert set(count) == {"one", "two"} and min(count.values()) > 80
    assert max(i for s, i in pairs if s == "two") < 15  # subset [0%, 50%] of 30 lines


def test_blend_epochized_defines_the_epoch(lines: Path) -> None:
    dataset = _train(lines / "epochized.yaml", repeat=False)
    got = Counter(s for b in get_loader(dataset) for s in b.source)
    assert got == {"one": 110, "three": 10}


def test_ranks_and_workers_split_one_file_exactly(lines: Path) -> None:
    seen: Counter[int] = Counter()
    for rank in range(3):
        dataset = get_train_dataset(
            lines / "ds1.jsonl",
            worker_config=WorkerConfig(rank=rank, world_size=3, num_workers=2, seed_offset=42),
            batch_size=1,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            task_encoder=TextEncoder(),
            repeat=False,
        )
        seen.update(i for batch in get_loader(dataset) for i in batch.idx)
    assert seen == Counter(range(55))


def test_val_reads_lines_in_order(lines: Path) -> None:
    dataset = get_val_dataset(
        lines / "ds3.jsonl",
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=4,
        task_encoder=TextEncoder(),
    )
    assert [i for b in get_loader(dataset) for i in b.idx] == list(range(20))


@pytest.mark.parametrize("workers", [0, 2])
def test_exact_resume_through_a_jsonl_leaf(lines: Path, workers: int) -> None:
    assert_loader_resumes(
        lambda: get_savable_loader(
            _train(lines / "blend.yaml", workers, batch_size=3, shuffle_buffer_size=7,
                   max_samples_per_sequence=4)
        ),
        total=30,
        save_points=[0, 1, 9, 22],
    )  # fmt: skip


def test_crude_lines_without_a_cooker_are_refused(lines: Path) -> None:
    dataset = get_train_dataset(
        lines / "ds1.jsonl",
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=1,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=DefaultTaskEncoder(),
    )
    batch = next(iter(get_loader(dataset)))  # uncooked: the crude dicts, collated
    assert isinstance(batch, dict) and "json" in batch


@dataclass
class Labelled(Sample):
    image: torch.Tensor | None = None
    label: int = 0


def cook_labelled(sample: dict, media) -> Labelled:
    image = media.get(sample["path"], sample)  # first: it adds the file to __sources__
    return Labelled(**basic_sample_keys(sample), image=image, label=sample["label"])


class LabelEncoder(DefaultTaskEncoder):
    cookers = (Cooker(cook_labelled),)


def test_meta_list_with_media_root_through_the_pipeline(tmp_path: Path) -> None:
    names = write_images(tmp_path / "media", 12)
    meta = write_meta_list(tmp_path / "meta.txt", names, 30)
    prepare_lines(meta, media_root=tmp_path / "media", progress=False)
    dataset = get_train_dataset(
        meta,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=2, seed_offset=1),
        batch_size=5,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=LabelEncoder(),
        repeat=False,
    )
    batches = list(get_loader(dataset))
    keys = sorted(int(k) for b in batches for k in b.__key__)
    assert keys == list(range(30))
    for batch in batches:
        assert batch.image.shape == (5, 3, 16, 16)
        assert [int(k) % 10 for k in batch.__key__] == batch.label
        assert {s.file_names[0] for s in batch.__sources__} >= {
            names[int(k) % 12] for k in batch.__key__
        }


def test_jsonl_leaf_with_aux_folder(tmp_path: Path) -> None:
    names = write_images(tmp_path / "pics", 8)
    path = write_caption_jsonl(tmp_path / "caps.jsonl", 16, image_names=names)
    prepare_lines(path, progress=False)
    (tmp_path / "mds.yaml").write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        "    path: caps.jsonl\n    aux:\n      pics: filesystem://pics\n"
    )

    def cook(sample: dict, pics) -> Labelled:
        image = pics.get(sample["json"]["image"], sample)
        return Labelled(**basic_sample_keys(sample), image=image, label=sample["json"]["idx"])

    class Encoder(DefaultTaskEncoder):
        cookers = (Cooker(cook),)

    dataset = get_train_dataset(
        tmp_path / "mds.yaml",
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=4,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=Encoder(),
        repeat=False,
    )
    batches = list(get_loader(dataset))
    assert sorted(i for b in batches for i in b.label) == list(range(16))
    assert all(b.image.shape == (4, 3, 16, 16) for b in batches)


def test_bad_aux_is_named(tmp_path: Path) -> None:
    _jsonl(tmp_path, "x.jsonl", 5)
    (tmp_path / "mds.yaml").write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        "    path: x.jsonl\n    aux:\n      pics: ftp://bucket/pics\n"
    )
    with pytest.raises(DatasetFormatError, match=r"splits.train.aux.pics: 'ftp://bucket/pics'"):
        _train(tmp_path / "mds.yaml")


@pytest.mark.usefixtures("collector_spared")  # Energon collects garbage
def test_energon_reads_the_same_lines(lines: Path) -> None:
    energon = pytest.importorskip("megatron.energon")

    @energon.stateless
    def cook(sample: dict) -> energon.TextSample:
        return energon.TextSample(
            **energon.basic_sample_keys(sample), text=sample["json"]["caption"]
        )

    class EnergonEncoder(energon.DefaultTaskEncoder):
        cookers = [energon.Cooker(cook)]

    theirs = energon.get_train_dataset(
        lines / "ds1.jsonl",
        worker_config=energon.WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=1,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=EnergonEncoder(),
        repeat=False,
    )
    their_texts = sorted(t for b in energon.get_loader(theirs) for t in b.text)
    ours = _train(lines / "ds1.jsonl", repeat=False)
    assert sorted(t for b in get_loader(ours) for t in b.text) == their_texts
    assert len(their_texts) == 55


def test_a_100000_digit_integer_in_an_energon_indexed_file_is_a_named_skip(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging
    import subprocess
    import sys

    import numpy as np

    lines = [
        b'{"idx": 0, "caption": "a"}',
        b'{"idx": 1, "caption": ' + b"7" * 100_000 + b"}",  # valid JSON Python refuses
        b'{"idx": 2, "caption": "c"}',
    ]
    path = tmp_path / "big.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    offsets = np.cumsum([0] + [len(line) + 1 for line in lines]).astype("<u8")
    (tmp_path / "big.jsonl.idx").write_bytes(offsets.tobytes())  # as Energon's preparer writes
    done = subprocess.run(
        [sys.executable, "-m", "energon_lite.cli", "preview", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "big.jsonl: sample '1': part 'json': not readable as JSON" in done.stderr
    assert "unexpected" not in done.stderr and "report it" not in done.stderr
    with caplog.at_level(logging.WARNING, logger="energon_lite"):
        batches = list(get_loader(_train(path, repeat=False)))
    assert [i for batch in batches for i in batch.idx] == [0, 2]  # the bad line skipped
    assert "big.jsonl: sample '1': part 'json': not readable as JSON" in caplog.text
