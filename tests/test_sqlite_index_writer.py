"""``energon_lite.flavors.webdataset.indexing.SqliteIndexWriter``: Energon's ``index.sqlite``
tables, written the way megatron-energon (the oracle) writes them."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import energon_lite.flavors.webdataset.prepare as our_prepare
from energon_lite.epathlib import EPath
from energon_lite.flavors.webdataset.indexing import DuplicateSampleKeyError, SqliteIndexWriter
from energon_lite.flavors.webdataset.prepare import IndexSample

ROWS = [
    ("first", 0, 0, 0, 10),
    ("duplicate", 0, 1, 10, 10),
    ("duplicate", 1, 0, 20, 10),
]


def _samples(module: Any, rows: list[tuple[str, int, int, int, int]]) -> list[Any]:
    return [
        module.IndexSample(
            tar_file_id=tar, sample_key=key, sample_index=index, byte_offset=off, byte_size=size
        )
        for key, tar, index, off, size in rows
    ]


def _dump(path: Path) -> dict[str, Any]:
    db = sqlite3.connect(path)
    try:
        return {
            "samples": db.execute("SELECT * FROM samples ORDER BY rowid").fetchall(),
            "parts": db.execute("SELECT * FROM sample_parts ORDER BY rowid").fetchall(),
            "schema": sorted(
                (kind, name)
                for kind, name in db.execute("SELECT type, name FROM sqlite_master")
                if not name.startswith("sqlite_")
            ),
        }
    finally:
        db.close()


def test_a_duplicate_key_adds_no_row_of_its_batch(tmp_path: Path) -> None:
    with SqliteIndexWriter(EPath(tmp_path / "index.sqlite")) as writer:
        writer.append_samples(_samples(our_prepare, ROWS[:1]))
        with pytest.raises(DuplicateSampleKeyError) as exc:
            writer.append_samples(
                [
                    IndexSample(
                        tar_file_id=2, sample_key="x", sample_index=0, byte_offset=0, byte_size=1
                    ),
                    IndexSample(
                        tar_file_id=2,
                        sample_key="first",
                        sample_index=1,
                        byte_offset=1,
                        byte_size=1,
                    ),
                ]
            )
        assert exc.value.sample_key == "first"
        assert writer.db is not None
        assert writer.db.execute("SELECT sample_key FROM samples").fetchall() == [("first",)]
        with pytest.raises(DuplicateSampleKeyError, match="'duplicate'") as exc:
            writer.append_samples(_samples(our_prepare, ROWS[1:]))
        assert exc.value.sample_key == "duplicate"
    assert _dump(tmp_path / "index.sqlite")["samples"] == [(0, "first", 0, 0, 10)]


def test_tables_match_megatron_energon(tmp_path: Path) -> None:
    energon = pytest.importorskip("megatron.energon.flavors.webdataset.indexing")
    energon_prepare = pytest.importorskip("megatron.energon.flavors.webdataset.prepare")
    from megatron.energon.epathlib import EPath as TheirEPath

    rows = [("a", 0, 0, 0, 512), ("b", 0, 1, 512, 1024), ("c", 1, 0, 0, 512)]
    parts = [(0, 0, "jpg", 512, 100), (0, 0, "txt", 1024, 5), (1, 0, "txt", 512, 7)]
    dumps = []
    for name, module, prep, path_type in (
        ("ours", None, None, EPath),
        ("theirs", energon, energon_prepare, TheirEPath),
    ):
        path = tmp_path / name / "index.sqlite"
        writer_type = SqliteIndexWriter if module is None else module.SqliteIndexWriter
        part_type = (our_prepare if prep is None else prep).IndexSamplePart
        sample_module = our_prepare if prep is None else prep
        with writer_type(path_type(path)) as writer:
            writer.append_samples(_samples(sample_module, rows))
            writer.append_parts(
                [
                    part_type(
                        tar_file_id=t,
                        sample_index=i,
                        part_name=n,
                        content_byte_offset=o,
                        content_byte_size=s,
                    )
                    for t, i, n, o, s in parts
                ]
            )
            with pytest.raises(Exception) as exc:
                writer.append_samples(
                    _samples(sample_module, [("x", 2, 0, 0, 1), ("b", 2, 1, 1, 1)])
                )
            assert type(exc.value).__name__ == "DuplicateSampleKeyError"
            assert exc.value.sample_key == "b"  # type: ignore[attr-defined]
        dumps.append(_dump(path))
    assert dumps[0] == dumps[1]
