"""Parquet folders in the Hugging Face Hub layout and ``save_to_disk`` folders, written by
``datasets`` itself (an ``Image`` feature), read in place: crude and typed samples, splits and
configs, counts from the metadata alone, random access by key, info / lint / preview."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import installed_or_skip, read_split
from PIL import Image

from energon_lite import CaptioningSample
from energon_lite.cli.info import dataset_info, lint, preview
from energon_lite.cli.main import main
from energon_lite.decode.image import decode_image
from energon_lite.errors import DatasetFormatError
from energon_lite.flavors.tables import TableSource
from energon_lite.sources.kinds import kind_of
from energon_lite.synth.tables import caption_rows, write_hf_parquet, write_save_to_disk

installed_or_skip("pyarrow", "datasets")

ROWS = caption_rows(30)


def _image(jpg: bytes) -> np.ndarray:
    return decode_image(jpg, "torchrgb").numpy()


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hub")
    write_hf_parquet(root, ROWS[:24], files=3, rows_per_group=3)
    write_hf_parquet(root, ROWS[24:], files=1, split="test")
    return root


def test_a_hub_folder_yields_every_column_by_name_with_stable_keys(hub):
    assert kind_of(hub).name == "parquet"
    samples = read_split(hub)
    assert len(samples) == 24
    by_caption = {s["caption"]: s for s in samples}
    for i, (jpg, caption) in enumerate(ROWS[:24]):
        sample = by_caption[caption]
        np.testing.assert_array_equal(sample["image"].numpy(), _image(jpg))
        assert sample["__key__"] == f"data/train-{i // 8:05d}-of-00003.parquet/{i % 8}"
    assert sorted(s["caption"] for s in read_split(hub, "test")) == sorted(c for _, c in ROWS[24:])


def test_counts_come_from_the_footers_and_a_key_reads_its_row_group(hub):
    source = TableSource(hub, "train", format_name="parquet")
    assert len(source) == 24 and source.table.counts == [8, 8, 8]
    assert source.table.row_groups[1] == [0, 3, 6, 8]
    assert not source.table._blocks  # opening decoded no row group
    key, row = source.read(1, 7)  # the last row group of the second file
    assert key == "data/train-00001-of-00003.parquet/7" and row["caption"] == ROWS[15][1]
    assert row["image"] == ROWS[15][0]
    assert list(source.table._blocks) == [(1, 2)]
    assert [k for k, _ in source.read_range(0, 2, 5)] == [
        f"data/train-00000-of-00003.parquet/{i}" for i in (2, 3, 4)
    ]


def test_prepare_writes_only_nv_meta_and_the_folder_yields_typed_samples(hub, tmp_path, capsys):
    folder = tmp_path / "hub"
    write_hf_parquet(folder, ROWS[:10], files=2)
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
    field_map = json.dumps({"image": "image", "caption": "caption"})
    main(["prepare", "--sample-type", "CaptioningSample", "--field-map", field_map, str(folder)])
    assert "wrote .nv-meta/ only" in capsys.readouterr().out
    after = {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
    assert {p: t for p, t in after.items() if ".nv-meta" not in p.parts} == before
    samples = read_split(folder)
    assert all(isinstance(s, CaptioningSample) for s in samples)
    assert sorted(s.caption for s in samples) == sorted(c for _, c in ROWS[:10])
    first = next(s for s in samples if s.caption == ROWS[0][1])
    np.testing.assert_array_equal(first.image.numpy(), _image(ROWS[0][0]))
    info = dataset_info(folder)
    assert "split train: 10 samples in 2 files" in info and "CaptioningSample" in info
    assert lint(folder, progress=False) == []
    assert "caption (<class 'str'>): 'sample 0: a picture'" in "\n".join(
        preview(folder, "train", 1)
    )


def test_a_field_map_naming_no_column_fails_at_prepare_naming_it(tmp_path, capsys):
    folder = write_hf_parquet(tmp_path / "bad", ROWS[:4], files=1)
    field_map = json.dumps({"image": "picture", "caption": "caption"})
    args = ["prepare", "--sample-type", "CaptioningSample", "--field-map", field_map, str(folder)]
    assert main(args) != 0
    assert "field 'image' needs part 'picture'; the sample has ['caption', 'image']" in (
        capsys.readouterr().err
    )
    assert not (folder / ".nv-meta").exists()


def test_configs_are_read_one_at_a_time_and_splits_by_file_name(tmp_path):
    write_hf_parquet(tmp_path, ROWS[:6], files=1, config="small")
    write_hf_parquet(tmp_path, ROWS[6:16], files=2, config="large")
    with pytest.raises(DatasetFormatError, match=r"no split 'train'; it has \['large/train'"):
        TableSource(tmp_path, "train", format_name="parquet")
    assert len(TableSource(tmp_path, "large/train", format_name="parquet")) == 10
    assert sorted(s["caption"] for s in read_split(tmp_path / "small")) == [c for _, c in ROWS[:6]]


def test_plain_parquet_with_binary_images_and_an_hf_image_without_bytes(tmp_path):
    """Files written by pyarrow alone: a binary column decoded by content, other columns as
    read; an ``Image`` struct holding only a path reads the file beside the Parquet file."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "jpg": [jpg for jpg, _ in ROWS[:3]],
            "text": [c for _, c in ROWS[:3]],
            "tags": [["a"], ["b", "c"], []],
        }
    )
    pq.write_table(table, tmp_path / "part-0.parquet")
    samples = sorted(read_split(tmp_path), key=lambda s: s["__key__"])
    assert [s["text"] for s in samples] == [c for _, c in ROWS[:3]]
    assert [s["tags"] for s in samples] == [["a"], ["b", "c"], []]
    np.testing.assert_array_equal(samples[1]["jpg"].numpy(), _image(ROWS[1][0]))

    other = tmp_path / "paths"
    (other / "data").mkdir(parents=True)
    Image.open(io.BytesIO(ROWS[0][0])).save(other / "data" / "a.jpg")
    features = datasets.Features({"image": datasets.Image(decode=False)})
    dataset = datasets.Dataset.from_dict({"image": [{"bytes": None, "path": "a.jpg"}]}, features)
    # to_parquet would embed the file; the Hub also holds Parquet files that only name it
    pq.write_table(dataset.data.table, other / "data" / "train-00000-of-00001.parquet")
    (sample,) = read_split(other)
    assert sample["image"].shape == (3, 8, 8)


def test_a_save_to_disk_dataset_dict_reads_each_split(tmp_path):
    import datasets

    folder = tmp_path / "disk"
    dataset = datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict({"n": list(range(7))}),
         "validation": datasets.Dataset.from_dict({"n": list(range(100, 103))})}
    )  # fmt: skip
    dataset.save_to_disk(str(folder), num_shards={"train": 2, "validation": 1})
    assert kind_of(folder).name == "arrow"
    assert sorted(s["n"] for s in read_split(folder)) == list(range(7))
    assert sorted(s["n"] for s in read_split(folder, "validation")) == [100, 101, 102]
    with pytest.raises(DatasetFormatError, match="no split 'test'"):
        read_split(folder, "test")


def test_a_save_to_disk_image_dataset_reads_back_what_was_written(tmp_path):
    folder = write_save_to_disk(tmp_path / "images", ROWS[:12], shards=3)
    samples = read_split(folder)
    assert sorted(s["caption"] for s in samples) == sorted(c for _, c in ROWS[:12])
    for sample in samples:
        i = int(sample["caption"].split(":")[0].split()[1])
        np.testing.assert_array_equal(sample["image"].numpy(), _image(ROWS[i][0]))
