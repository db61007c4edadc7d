"""The shard record's binary table: opening a split reads it instead of parsing the JSON
record, and checks a shard when a process first reads it, not every shard at open."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from conftest import make_dataset, open_and_read

from energon_lite.errors import DatasetFormatError
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.shards.meta import load_info
from energon_lite.shards.record_table import ROW_CRC, TABLE
from energon_lite.shards.shard_record import load_record

META = ".nv-meta"


def test_a_split_opens_without_checking_its_shards_and_names_one_when_read(
    tmp_path: Path,
) -> None:
    root = make_dataset(tmp_path / "ds", 60, 20)
    (root / "parts/data-1.tar").unlink()
    ds = PreparedDataset(root, "train")  # no shard is touched to open
    assert len(ds) == 60
    assert ds.read(ds.shard_names.index("parts/data-0.tar"), 3)[0].endswith("000003")
    missing = ds.shard_names.index("parts/data-1.tar")
    with pytest.raises(DatasetFormatError, match=r"parts/data-1\.tar: shard is missing"):
        ds.read(missing, 0)
    with pytest.raises(DatasetFormatError, match=r"parts/data-1\.tar: shard is missing"):
        ds.read_range(missing, 0, 5)  # checked again: a failed check is not remembered


def test_prepare_writes_the_table_and_an_open_reads_it(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "ds", 60, 20)
    names = load_info(root).shard_names
    record = load_record(root, names)
    assert record is not None and record.rows is not None  # the table, not the JSON
    parsed = json.loads((root / META / "energon_lite.json").read_text())
    for shard_id, name in enumerate(names):
        assert list(record.shard(shard_id)) == parsed["shards"][name]
        assert list(record.probe(shard_id) or ()) == parsed["probes"][name]
    assert record.content_digest == parsed["content_digest"]
    fingerprint = PreparedDataset(root, "train").fingerprint()
    again = pickle.loads(pickle.dumps(open_and_read(root)))  # a spawned worker's copy
    assert again.fingerprint() == fingerprint and again.read(0, 0) == open_and_read(root).read(0, 0)
    (root / META / TABLE).unlink()  # as prepared before the table: the JSON, same dataset
    record = load_record(root, names)
    assert record is not None and record.rows is None
    assert PreparedDataset(root, "train").fingerprint() == fingerprint


def test_a_table_that_no_longer_belongs_to_the_json_is_ignored(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "ds", 60, 20)
    path = root / META / "energon_lite.json"
    parsed = json.loads(path.read_text())
    parsed["shards"]["parts/data-2.tar"][0] += 512  # rewritten by a tool that keeps no table
    path.write_text(json.dumps(parsed, indent=1) + "\n")
    names = load_info(root).shard_names
    record = load_record(root, names)
    assert record is not None and record.rows is None  # the JSON wins
    with pytest.raises(DatasetFormatError, match=r"data-2\.tar: shard changed since prepare"):
        open_and_read(root, first="parts/data-2.tar")
    (root / META / TABLE).write_bytes(b"ELRTAB1\n garbage")  # damaged: the JSON again
    assert load_record(root, names).rows is None  # type: ignore[union-attr]


def test_a_damaged_row_is_found_at_open_not_blamed_on_an_intact_shard(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A flipped byte in a row's size made an intact shard fail ("size 4295049216 ->
    81920"); the rows' checksum finds it at open, a warning names the table, and the JSON
    serves the split. Every other fallback from a table that is there warns too."""
    root = make_dataset(tmp_path / "ds", 60, 20)
    table = root / META / TABLE
    data = bytearray(table.read_bytes())
    row_size = ROW_CRC.itemsize  # size, mtime, probe end, probe, CRC-32, padding
    first_row = len(data) - 3 * row_size  # three shards: the rows end the file
    data[first_row + 4] ^= 0x01  # the first row's size, bit 32
    table.write_bytes(bytes(data))
    names = load_info(root).shard_names
    with caplog.at_level("WARNING", logger="energon_lite"):
        record = load_record(root, names)
    assert record is not None and record.rows is None  # the JSON serves
    assert f"{table}: its rows do not match their checksum (damaged)" in caplog.text
    assert open_and_read(root).read(0, 0)[0]  # the intact shard reads
    caplog.clear()
    table.write_bytes(b"ELRTAB1\n garbage")
    with caplog.at_level("WARNING", logger="energon_lite"):
        assert load_record(root, names).rows is None  # type: ignore[union-attr]
    assert f"{table}: " in caplog.text and "energon_lite.json instead" in caplog.text


def test_prepare_records_each_shards_crc32_and_lint_finds_a_same_size_edit(
    tmp_path: Path,
) -> None:
    """A same-size edit in the middle of a shard, with the mtime put back, passes the
    size/mtime/probe checks of an open; the whole-shard CRC-32 prepare recorded (JSON and
    table alike) finds it wherever the whole shard is read: ``lint`` here, the node cache's
    fill in test_shard_cache.py."""
    import os
    import tarfile
    import zlib

    from energon_lite.cli.info import lint

    root = make_dataset(tmp_path / "ds", 60, 20)
    names = load_info(root).shard_names
    record = load_record(root, names)
    assert record is not None and record.rows is not None
    parsed = json.loads((root / META / "energon_lite.json").read_text())
    for shard_id, name in enumerate(names):
        crc = zlib.crc32((root / name).read_bytes())
        assert record.crc32(shard_id) == parsed["crc32"][name] == crc
    assert lint(root, progress=False) == []
    shard = root / "parts/data-1.tar"
    with tarfile.open(shard) as tar:
        member = tar.getmember(tar.getnames()[5])  # a sample in the middle: no probe reads it
    data, before = bytearray(shard.read_bytes()), shard.stat()
    data[member.offset_data + 8] ^= 0xFF  # one byte of one caption
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    edited = names.index("parts/data-1.tar")
    assert len(PreparedDataset(root, "train").read_range(edited, 0, 20)) == 20  # an open serves it
    problems = [p for p in lint(root, progress=False) if "CRC-32" in p]
    assert problems == [
        f"train: {shard}: shard changed since prepare: the CRC-32 of its {len(data)} bytes is "
        f"{zlib.crc32(bytes(data)):08x}, prepare read {record.crc32(edited):08x} (an edit that kept "
        "its size and mtime); re-run prepare"
    ]
