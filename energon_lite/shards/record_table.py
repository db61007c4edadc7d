"""The shard record by shard id: ``energon_lite.json`` parsed, or its compact binary twin.

``energon_lite.json`` (``shard_record.py``) holds, per shard name, what prepare saw: size,
mtime and a probe. A dataset of 100,000 shards makes it 16 MB of JSON, about a second to
parse and tens of MB of Python objects in every process that opens the split. So prepare also
writes ``energon_lite.table``: the same rows as fixed-width binary, in ``.info.json``'s shard
order, behind a small JSON header::

    b"ELRTAB1\\n" | u64 header length | header JSON | zero padding to 8 | rows

Each row is ``size, mtime_ns, probe end`` (little-endian int64) and the probe digest (32
ASCII hex bytes, empty when the record has none); a table of records with whole-shard
CRC-32s (``ELRTAB2``, since 2026-11-28) adds the CRC-32 and 4 bytes of padding. The header names what the rows belong to:
the blake2b of the ``energon_lite.json`` bytes they were made from and of the shard names in
row order (``\\n``-joined), the content digest and the remote versions. An open reads the JSON
bytes and hashes them (tens of ms for 16 MB) instead of parsing them, and maps the rows; a
lookup is an array index. The header also holds the blake2b of the rows (tables written
since 2026-11-28), so a damaged row is found at open, before its size could be blamed on an
intact shard. When the table is missing (datasets prepared before it, or by Energon) the JSON
is parsed as before; when it is there but stale (another tool rewrote the JSON), damaged or
does not fit the names, a warning names the table and why, and the JSON is parsed: every
older form still opens.
"""

from __future__ import annotations

import hashlib
import json
import logging
import struct
from pathlib import Path
from typing import Any

import numpy as np

from energon_lite.errors import DatasetFormatError
from energon_lite.storage import StoragePath, ops

logger = logging.getLogger("energon_lite")

TABLE = "energon_lite.table"
MAGIC = b"ELRTAB1\n"
ROW = np.dtype([("size", "<i8"), ("mtime", "<i8"), ("end", "<i8"), ("probe", "S32")])
MAGIC_CRC = b"ELRTAB2\n"  # rows with the whole shard's CRC-32
ROW_CRC = np.dtype(
    [("size", "<i8"), ("mtime", "<i8"), ("end", "<i8"), ("probe", "S32"), ("crc32", "<u4"),
     ("pad", "<u4")]
)  # fmt: skip
_LAYOUTS = {MAGIC: ROW, MAGIC_CRC: ROW_CRC}


def names_digest(names: list[str]) -> str:
    """The blake2b of the names in order, ``\\n``-joined (surrogates kept as bytes)."""
    joined = "\n".join(names).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(joined, digest_size=16).hexdigest()


def encode_table(record: dict[str, Any], record_bytes: bytes) -> bytes | None:
    """The table of ``record`` (as ``make_record`` returns it), or ``None`` where a row does
    not fit the fixed width (a record without probes is left to the JSON)."""
    shards, probes = record["shards"], record.get("probes")
    if not isinstance(probes, dict):
        return None
    names = list(shards)
    crcs = record.get("crc32")
    magic, layout = (MAGIC_CRC, ROW_CRC) if isinstance(crcs, dict) else (MAGIC, ROW)
    rows = np.zeros(len(names), dtype=layout)
    for i, name in enumerate(names):
        entry, probe = shards[name], probes.get(name)
        if not (isinstance(probe, list) and len(probe) == 2 and len(str(probe[1])) == 32):
            return None  # a shard without a well-formed probe: the JSON alone holds it
        row = (entry[0], entry[1], probe[0], str(probe[1]).encode("ascii"))
        rows[i] = (*row, crcs[name], 0) if isinstance(crcs, dict) else row
    header = {
        "record_blake2b": hashlib.blake2b(record_bytes, digest_size=16).hexdigest(),
        "names_blake2b": names_digest(names),
        "count": len(names),
        "content_digest": record["content_digest"],
        "remote_versions": record.get("remote_versions") or {},
        "rows_blake2b": _rows_digest(rows),
    }
    text = json.dumps(header).encode("utf-8")
    padding = b"\0" * (-(len(magic) + 8 + len(text)) % 8)
    return magic + struct.pack("<Q", len(text)) + text + padding + rows.tobytes()


class ShardRecord:
    """What prepare recorded per shard, looked up by shard id (``names[shard_id]``)."""

    def __init__(
        self,
        where: StoragePath,
        names: list[str],
        content_digest: str,
        *,
        parsed: dict[str, Any] | None = None,
        rows: np.ndarray | None = None,
        versions: dict[str, str] | None = None,
    ) -> None:
        self.where = where  # the JSON record, named in errors
        self.names = names
        self.content_digest = content_digest
        self.parsed = parsed  # the JSON form (old records, or no usable table)
        self.rows = rows  # the table form
        self.remote_versions = versions or {}
        self.has_probes = rows is not None or isinstance((parsed or {}).get("probes"), dict)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        rows = self.rows
        if isinstance(rows, np.memmap) and rows.filename is not None:  # sent by its place
            state["rows"] = (rows.filename, rows.offset, len(rows), rows.dtype.itemsize)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        rows = state["rows"]
        if isinstance(rows, tuple):
            filename, offset, count, itemsize = rows
            layout = ROW_CRC if itemsize == ROW_CRC.itemsize else ROW
            state["rows"] = np.memmap(
                filename, dtype=layout, mode="r", offset=offset, shape=(count,)
            )
        self.__dict__.update(state)

    def shard(self, shard_id: int) -> tuple[int, int]:
        """``(size, mtime_ns)`` as prepare saw them; names an unrecorded shard."""
        name = self.names[shard_id]
        if self.rows is not None:
            row = self.rows[shard_id]
            return int(row["size"]), int(row["mtime"])
        assert self.parsed is not None
        entry = self.parsed["shards"].get(name)
        if not (isinstance(entry, list) and len(entry) == 2):
            raise DatasetFormatError(
                f"{self.where}: shard {name!r} is not recorded; the dataset changed since "
                "prepare: re-run prepare"
            )
        return entry[0], entry[1]

    def crc32(self, shard_id: int) -> int | None:
        """The CRC-32 of the whole shard as prepare read it; ``None`` for a record written
        before they were recorded."""
        if self.rows is not None:
            return (
                int(self.rows[shard_id]["crc32"])
                if "crc32" in (self.rows.dtype.names or ())
                else None
            )
        crcs = (self.parsed or {}).get("crc32")
        value = crcs.get(self.names[shard_id]) if isinstance(crcs, dict) else None
        return value if isinstance(value, int) else None

    def probe(self, shard_id: int) -> tuple[int, str] | None:
        """``(end, digest)`` of the shard's probe; ``None`` for a record without probes."""
        name = self.names[shard_id]
        if self.rows is not None:
            row = self.rows[shard_id]
            return int(row["end"]), row["probe"].decode("ascii")
        probes = (self.parsed or {}).get("probes")
        if not isinstance(probes, dict):
            return None
        entry = probes.get(name)
        if entry is None:
            raise DatasetFormatError(
                f"{self.where}: shard {name!r} has no probe; the record is damaged: re-run "
                "prepare (`--tar-index-only` keeps the splits)"
            )
        if not (
            isinstance(entry, list)
            and len(entry) == 2
            and isinstance(entry[0], int)
            and isinstance(entry[1], str)
        ):
            raise DatasetFormatError(
                f"{self.where}: probes[{name!r}] is not [end, digest]; re-run prepare"
            )
        return entry[0], entry[1]


def load_table(
    meta: StoragePath, record_bytes: bytes, names: list[str], where: StoragePath
) -> ShardRecord | None:
    """The table form of the record, or ``None`` where there is none that belongs to these
    record bytes and names (the caller then parses the JSON; a table that is there but not
    usable is named in a warning)."""
    path = meta / TABLE

    def fallback(why: str) -> ShardRecord | None:
        logger.warning("%s: %s; reading %s instead (slower to open)", path, why, where)
        return None

    try:
        if isinstance(path, Path):
            if not path.exists():
                return None
            head = _read_head(path)
        else:
            if not ops.exists(path):
                return None
            data = ops.read_bytes(path)
            head = data[: 16 + _header_length(data[:16])] if data[:8] in _LAYOUTS else b""
    except (OSError, DatasetFormatError) as exc:
        return fallback(f"unreadable ({exc})")
    layout = _LAYOUTS.get(head[:8])
    if layout is None:
        return fallback("not a shard record table (damaged header)")
    length = _header_length(head[:16])
    try:
        header = json.loads(head[16 : 16 + length])
    except (ValueError, UnicodeDecodeError):
        return fallback("its header is not JSON (damaged)")
    start = 16 + length + (-(16 + length) % 8)
    if not isinstance(header, dict) or not isinstance(header.get("content_digest"), str):
        return fallback("its header is damaged")
    if (
        header.get("count") != len(names)
        or header.get("record_blake2b") != hashlib.blake2b(record_bytes, digest_size=16).hexdigest()
        or header.get("names_blake2b") != names_digest(names)
    ):
        return fallback("made for another version of the record or split (stale)")
    rows: np.ndarray
    try:
        if isinstance(path, Path):
            if path.stat().st_size != start + len(names) * layout.itemsize:
                return fallback("its rows are cut short or too long (damaged)")
            rows = np.memmap(path, dtype=layout, mode="r", offset=start, shape=(len(names),))
        else:
            rows = np.frombuffer(data, dtype=layout, offset=start, count=len(names))
    except (OSError, ValueError) as exc:
        return fallback(f"its rows are unreadable ({exc})")
    expected = header.get("rows_blake2b")  # absent in tables written before it was
    if expected is not None and expected != _rows_digest(rows):
        return fallback("its rows do not match their checksum (damaged)")
    versions = header.get("remote_versions")
    return ShardRecord(
        where,
        names,
        header["content_digest"],
        rows=rows,
        versions=versions if isinstance(versions, dict) else {},
    )


def _rows_digest(rows: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(rows).tobytes(), digest_size=16).hexdigest()


def _header_length(first: bytes) -> int:
    return struct.unpack("<Q", first[8:16])[0] if len(first) >= 16 else 0


def _read_head(path: Path) -> bytes:
    with open(path, "rb") as file:
        first = file.read(16)
        length = _header_length(first)
        if first[:8] not in _LAYOUTS or length > 1 << 30:
            return b""
        return first + file.read(length)
