"""Energon's ``SqliteIndexWriter``: writes a dataset's ``.nv-meta/index.sqlite`` tables.

Tables (Energon's schema, so Energon and energon_lite read each other's files):
``samples(tar_file_id, sample_key UNIQUE, sample_index, byte_offset, byte_size)``,
``sample_parts(tar_file_id, sample_index, part_name, content_byte_offset,
content_byte_size)`` and, with ``enable_media_metadata``, ``media_metadata`` and
``media_filters``. The lookup indexes are built once on ``close()``, after all rows are in.

``append_samples`` is all or nothing: a batch holding a sample key that is already in the
table (or twice in the batch) adds no row and raises :class:`DuplicateSampleKeyError`
naming that key.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from os import PathLike
from pathlib import Path
from types import TracebackType

from energon_lite.epathlib import EPath
from energon_lite.errors import ConfigError
from energon_lite.flavors.webdataset.prepare import IndexMediaMetadata, IndexSample, IndexSamplePart

_SAMPLES = (
    "CREATE TABLE IF NOT EXISTS samples (tar_file_id INTEGER NOT NULL, "
    "sample_key TEXT NOT NULL UNIQUE, sample_index INTEGER NOT NULL, "
    "byte_offset INTEGER, byte_size INTEGER)"
)
_PARTS = (
    "CREATE TABLE IF NOT EXISTS sample_parts (tar_file_id INTEGER, sample_index INTEGER, "
    "part_name TEXT, content_byte_offset INTEGER, content_byte_size INTEGER)"
)
_MEDIA = (
    "CREATE TABLE IF NOT EXISTS media_metadata (entry_key TEXT PRIMARY KEY, "
    "metadata_type TEXT NOT NULL, metadata_json TEXT NOT NULL)"
)
_FILTERS = (
    "CREATE TABLE IF NOT EXISTS media_filters (filter_id INTEGER PRIMARY KEY AUTOINCREMENT, "
    "strategy TEXT NOT NULL, patterns TEXT, created_at_utc TEXT DEFAULT CURRENT_TIMESTAMP, "
    "UNIQUE(strategy, patterns))"
)
_INDEXES = (
    "CREATE INDEX IF NOT EXISTS idx_samples_by_tar_and_idx ON samples(tar_file_id, sample_index)",
    "CREATE INDEX IF NOT EXISTS idx_sample_parts_seq "
    "ON sample_parts(tar_file_id, sample_index, content_byte_offset)",
    "CREATE INDEX IF NOT EXISTS idx_sample_parts_full ON sample_parts(tar_file_id, "
    "sample_index, part_name, content_byte_offset, content_byte_size)",
)


class DuplicateSampleKeyError(RuntimeError):
    """A sample key that is already in the index (``sample_key`` says which)."""

    def __init__(self, sample_key: str) -> None:
        super().__init__(f"Duplicate sample key encountered while indexing: {sample_key!r}")
        self.sample_key = sample_key


class SqliteIndexWriter:
    """Writes the sample, part and media tables of one ``index.sqlite`` (a local file)."""

    db: sqlite3.Connection | None

    def __init__(
        self,
        sqlite_path: EPath | str | PathLike[str],
        *,
        enable_sample_tables: bool = True,
        enable_media_metadata: bool = False,
        reset_tables: bool = True,
    ) -> None:
        if enable_sample_tables and not reset_tables:
            raise ConfigError(
                f"SqliteIndexWriter({sqlite_path}): enable_sample_tables=True needs "
                "reset_tables=True (the sample tables are always written anew)"
            )
        self.sqlite_path = sqlite_path if isinstance(sqlite_path, EPath) else EPath(sqlite_path)
        self.enable_sample_tables = enable_sample_tables
        self.enable_media_metadata = enable_media_metadata
        self.reset_tables = reset_tables
        path: Path = self.sqlite_path.local_path()  # sqlite needs a local file
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path)
        self.db.execute("PRAGMA busy_timeout = 5000")  # another writer holds the lock
        if enable_sample_tables:
            for table in ("samples", "sample_parts"):
                self.db.execute(f"DROP TABLE IF EXISTS {table}")  # its indexes go with it
            self.db.execute(_SAMPLES)
            self.db.execute(_PARTS)
        if enable_media_metadata:
            if reset_tables:
                self.db.execute("DROP TABLE IF EXISTS media_metadata")
                self.db.execute("DROP TABLE IF EXISTS media_filters")
            self.db.execute(_MEDIA)
            self.db.execute(_FILTERS)

    def _open(self) -> sqlite3.Connection:
        if self.db is None:
            raise ConfigError(f"SqliteIndexWriter({self.sqlite_path}): already closed")
        return self.db

    def append_samples(self, rows: Sequence[IndexSample]) -> None:
        """Add sample rows; none of them if one's key is a duplicate (DuplicateSampleKeyError)."""
        db = self._open()
        if not rows:
            return
        db.execute("SAVEPOINT append_samples")
        try:
            db.executemany(
                "INSERT INTO samples (tar_file_id, sample_key, sample_index, byte_offset, "
                "byte_size) VALUES (?, ?, ?, ?, ?)",
                (
                    (r.tar_file_id, r.sample_key, r.sample_index, r.byte_offset, r.byte_size)
                    for r in rows
                ),
            )
        except sqlite3.IntegrityError as exc:
            db.execute("ROLLBACK TO SAVEPOINT append_samples")  # rows before the duplicate
            db.execute("RELEASE SAVEPOINT append_samples")
            raise DuplicateSampleKeyError(self._duplicate(rows)) from exc
        db.execute("RELEASE SAVEPOINT append_samples")

    def _duplicate(self, rows: Sequence[IndexSample]) -> str:
        """The first key of ``rows`` that is in the table already or earlier in ``rows``."""
        db = self._open()
        seen: set[str] = set()
        for row in rows:
            known = db.execute("SELECT 1 FROM samples WHERE sample_key = ?", (row.sample_key,))
            if row.sample_key in seen or known.fetchone() is not None:
                return row.sample_key
            seen.add(row.sample_key)
        return rows[0].sample_key

    def append_parts(self, rows: Sequence[IndexSamplePart]) -> None:
        """Add sample part rows."""
        self._open().executemany(
            "INSERT INTO sample_parts (tar_file_id, sample_index, part_name, "
            "content_byte_offset, content_byte_size) VALUES (?, ?, ?, ?, ?)",
            (
                (
                    r.tar_file_id,
                    r.sample_index,
                    r.part_name,
                    r.content_byte_offset,
                    r.content_byte_size,
                )
                for r in rows
            ),
        )

    def append_media_metadata_batch(self, rows: Sequence[IndexMediaMetadata]) -> None:
        """Add or replace media metadata records (needs ``enable_media_metadata=True``)."""
        if not self.enable_media_metadata:
            raise ConfigError(
                f"SqliteIndexWriter({self.sqlite_path}): media metadata given, but the writer "
                "was made without enable_media_metadata=True"
            )
        self._open().executemany(
            "INSERT OR REPLACE INTO media_metadata (entry_key, metadata_type, metadata_json) "
            "VALUES (?, ?, ?)",
            ((r.entry_key, r.metadata_type, r.metadata_json) for r in rows),
        )

    def append_media_filter(self, *, strategy: str, patterns: str | None) -> None:
        """Record the media filter the metadata was gathered with (once per distinct filter)."""
        self._open().execute(
            "INSERT OR IGNORE INTO media_filters (strategy, patterns) VALUES (?, ?)",
            (strategy, patterns),
        )

    def close(self) -> None:
        """Build the lookup indexes, commit and close."""
        db = self._open()
        if self.enable_sample_tables:
            for statement in _INDEXES:
                db.execute(statement)
        db.commit()
        db.close()
        self.db = None

    def __enter__(self) -> SqliteIndexWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
