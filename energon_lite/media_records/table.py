"""The media metadata index: table ``media_metadata(entry_key TEXT PRIMARY KEY,
metadata_type TEXT, metadata_json TEXT)`` in ``.nv-meta/index.sqlite``, as Energon stores
it (``entry_key`` is a file's path in a folder, or ``"<sample key>.<part>"`` in a tar
dataset; ``metadata_type`` is ``"image"`` or ``"av"``). A dataset Energon prepared with
``--media-metadata-by-...`` reads here, and the reverse.

The table is written into a copy of the database that replaces the original by rename, so
a reader never sees half a table and the database's other tables are kept.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from energon_lite.errors import DatasetFormatError
from energon_lite.media_records.records import (
    MediaMetadataBase,
    deserialize_media_metadata,
    serialize_media_metadata,
)

META_FOLDER = ".nv-meta"
DB_NAME = "index.sqlite"


def write_media_table(root: Path, entries: Iterable[tuple[str, MediaMetadataBase]]) -> int:
    """Replace the media metadata table of the dataset or folder at ``root`` with
    ``entries`` (entry key, metadata); returns how many rows were written."""
    rows = []
    for key, record in entries:
        kind, payload = serialize_media_metadata(record)
        rows.append((key, kind.value, payload))
    meta = root / META_FOLDER
    meta.mkdir(exist_ok=True)
    target, tmp = meta / DB_NAME, meta / f"{DB_NAME}.{os.getpid()}.tmp"
    if target.is_file():
        shutil.copyfile(target, tmp)
    try:
        conn = sqlite3.connect(tmp)
        with conn:
            conn.execute("DROP TABLE IF EXISTS media_metadata")
            conn.execute(
                "CREATE TABLE media_metadata (entry_key TEXT PRIMARY KEY, "
                "metadata_type TEXT NOT NULL, metadata_json TEXT NOT NULL)"
            )
            conn.executemany("INSERT INTO media_metadata VALUES (?, ?, ?)", rows)
        conn.close()
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return len(rows)


def lookup_media(root: object, key: str, db: Path | None = None) -> MediaMetadataBase:
    """The recorded metadata of ``key`` in the dataset or folder at ``root`` (named in
    messages), read from ``db`` (default: its ``.nv-meta/index.sqlite``; a local copy of a
    remote one); ``KeyError`` when the table has no such entry."""
    db = db if db is not None else Path(str(root)) / META_FOLDER / DB_NAME
    if not db.is_file():
        raise DatasetFormatError(
            f"{root}: no media metadata; run `energon-lite prepare-media {root}`"
        )
    conn = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    try:
        row = conn.execute(
            "SELECT metadata_type, metadata_json FROM media_metadata WHERE entry_key = ?",
            (key,),
        ).fetchone()
    except sqlite3.OperationalError:
        raise DatasetFormatError(
            f"{db}: no media_metadata table; run `energon-lite prepare-media {root}`"
        ) from None
    finally:
        conn.close()
    if row is None:
        raise KeyError(f"{root}: no media metadata for {key!r}")
    return deserialize_media_metadata(row[0], row[1])
