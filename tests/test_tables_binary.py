"""MDS folders written by MosaicML Streaming's ``MDSWriter`` and LitData folders written by
``litdata.optimize``, read in place and compared with what was written, every column."""

from __future__ import annotations

import importlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import read_split, writer_library
from PIL import Image

from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset
from energon_lite.cli.main import main
from energon_lite.decode.image import decode_image
from energon_lite.flavors.tables import TableSource
from energon_lite.sources.kinds import kind_of
from energon_lite.synth.tables import caption_rows, mds_writer_class, write_litdata, write_mds
from energon_lite.testing import assert_loader_resumes

ROWS = caption_rows(24, size=(6, 5))
# The libraries that write the folders: the test command installs both (Streaming with
# --no-deps: 0.13 requires transformers<5, which datasets 5 refuses), so there they never skip.
STREAMING = "mosaicml-streaming==0.13.0"
LITDATA = "litdata"


def _by_key(path: Path, split: str = "train") -> dict[str, Any]:
    return {
        sample.__key__ if hasattr(sample, "__key__") else sample["__key__"]: sample
        for sample in read_split(path, split)
    }


def _rows(source: TableSource) -> list[dict[str, Any]]:
    """Every row of a source, in file order."""
    return [row for s, n in enumerate(source.table.counts) for _, row in source.read_range(s, 0, n)]


def _mds_sample(i: int) -> dict[str, Any]:
    jpg, caption = ROWS[i]
    picture = Image.open(io.BytesIO(jpg)).convert("RGB")
    return {
        "jpeg": picture, "png": picture, "pil": picture, "str": caption, "int": i - 5,
        "float": i / 3, "f32": np.float32(i / 4), "array": np.arange(i + 1, dtype=np.int16),
        "fixed": np.full((2, 3), i, dtype=np.float32), "bytes": jpg, "json": {"i": i, "l": [i]},
    }  # fmt: skip


MDS_COLUMNS = {
    "jpeg": "jpeg", "png": "png", "pil": "pil", "str": "str", "int": "int", "float": "float64",
    "f32": "float32", "array": "ndarray", "fixed": "ndarray:float32:2,3", "bytes": "bytes",
    "json": "json",
}  # fmt: skip


@pytest.mark.parametrize("compression", [None, "zstd:7"])
def test_every_mds_encoding_reads_back_what_was_written(tmp_path, compression):
    writer_library(mds_writer_class, STREAMING, "formats-test")
    folder = write_mds(
        tmp_path / "mds", MDS_COLUMNS, [_mds_sample(i) for i in range(24)], compression=compression
    )
    assert kind_of(folder).name == "mds"
    source = TableSource(folder, "train", format_name="mds")
    assert len(source.shard_names) > 1 and sum(source.table.counts) == 24
    for i, row in enumerate(_rows(source)):
        want = _mds_sample(i)
        assert Image.open(io.BytesIO(row["jpeg"])).size == (6, 5)
        assert Image.open(io.BytesIO(row["png"])).tobytes() == want["png"].tobytes()
        assert row["pil"].tobytes() == want["pil"].tobytes() and row["pil"].mode == "RGB"
        assert (row["str"], row["int"], row["float"]) == (want["str"], i - 5, i / 3)
        assert row["f32"] == want["f32"] and row["bytes"] == want["bytes"]
        np.testing.assert_array_equal(row["array"], want["array"])
        assert row["array"].dtype == np.int16
        np.testing.assert_array_equal(row["fixed"], want["fixed"])
        assert json.loads(row["json"]) == want["json"]
    # crude samples through the loader: images and JSON decoded by the decoder
    samples = _by_key(folder)
    first = samples[f"{source.shard_names[0]}/0"]
    assert first["json"] == {"i": 0, "l": [0]} and first["jpeg"].shape == (3, 5, 6)
    np.testing.assert_array_equal(first["bytes"].numpy(), decode_image(ROWS[0][0], "torchrgb"))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_prepared_mds_folder_resumes_exactly_over_its_epoch(tmp_path, workers):
    """Typed samples of a zstd MDS folder: the shuffle buffer holds keys, and a restore
    fetches its rows by (shard, sample) from the shards each worker decompressed itself."""
    writer_library(mds_writer_class, STREAMING, "formats-test")
    samples = [{"jpg": jpg, "txt": caption} for jpg, caption in ROWS]
    folder = write_mds(tmp_path / "mds", {"jpg": "bytes", "txt": "str"}, samples,
                       compression="zstd", size_limit=1 << 12)  # fmt: skip
    field_map = json.dumps({"image": "jpg", "caption": "txt"})
    main(["prepare", "--sample-type", "CaptioningSample", "--field-map", field_map, str(folder)])

    def loader() -> Any:
        dataset = get_train_dataset(
            folder, worker_config=WorkerConfig(0, 1, workers), batch_size=4,
            shuffle_buffer_size=6, max_samples_per_sequence=3, repeat=False,
        )  # fmt: skip
        return get_savable_loader(dataset)

    def batch_key(batch: Any) -> tuple[list[str], list[str]]:
        return list(batch.__key__), list(batch.caption)

    reference = assert_loader_resumes(loader, 6, [0, 2, 5], key=batch_key)
    source = TableSource(folder, "train", format_name="mds")
    assert len(source.shard_names) > 2
    # the keys in the order MDSWriter wrote the samples
    names, counts = source.shard_names, source.table.counts
    written = [f"{name}/{row}" for name, n in zip(names, counts) for row in range(n)]
    delivered = {k: c for keys, captions in reference for k, c in zip(keys, captions)}
    assert sum(len(keys) for keys, _ in reference) == len(delivered) == len(ROWS)
    assert delivered == {key: ROWS[i][1] for i, key in enumerate(written)}


def _litdata_item(i: int) -> dict[str, Any]:
    jpg, caption = ROWS[i]
    return {
        "image": Image.open(io.BytesIO(jpg)),  # a JPEG file: stored as its bytes
        "pil": Image.open(io.BytesIO(jpg)).convert("RGB"),
        "tensor": torch.arange(i + 1, dtype=torch.float32).reshape(1, -1),
        "array": np.arange(i + 2, dtype=np.int16),
        "label": i,
        "score": i / 3,
        "caption": caption,
    }


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_litdata_chunks_read_back_what_its_writer_wrote(tmp_path, compression):
    writer_library(lambda: importlib.import_module("litdata"), LITDATA, "formats-test")
    folder = write_litdata(tmp_path / "lit", _litdata_item, 20, chunk_size=6,
                           compression=compression)  # fmt: skip
    assert kind_of(folder).name == "litdata"
    source = TableSource(folder, "train", format_name="litdata")
    assert source.table.counts == [6, 6, 6, 2]
    for i, row in enumerate(_rows(source)):
        want = _litdata_item(i)
        encoded = io.BytesIO()  # LitData saves a JPEG opened from memory again, as Pillow does
        want["image"].save(encoded, format="JPEG")
        assert row["image"] == encoded.getvalue()
        assert row["pil"].tobytes() == want["pil"].tobytes()
        assert torch.equal(row["tensor"], want["tensor"])
        np.testing.assert_array_equal(row["array"], want["array"])
        assert (row["label"], row["score"], row["caption"]) == (i, i / 3, ROWS[i][1])
    field_map = json.dumps({"image": "image", "caption": "caption"})
    main(["prepare", "--sample-type", "CaptioningSample", "--field-map", field_map, str(folder)])
    samples = _by_key(folder)
    assert len(samples) == 20
    sample = samples["chunk-0-1.bin/2" if compression is None else "chunk-0-1.zstd.bin/2"]
    assert sample.caption == ROWS[8][1]
    stored = source.read(1, 2)[1]["image"]
    np.testing.assert_array_equal(sample.image.numpy(), decode_image(stored, "torchrgb"))
