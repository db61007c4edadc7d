"""``.nv-meta/energon_lite.json``: what each shard was when prepare indexed it.

Prepare records every shard's byte size and modification time, a *probe* per shard (a hash
of the first and the last 4 KiB of its samples, ``tar_index.probe_ranges``) and one digest
over all sample offsets (the ``.tar.idx`` content) and the first and last 64 KiB of every
shard (read during the header scan anyway). A process compares a local shard with the record when
it first reads it (``check_local_shard``: one ``stat``; opening a split of 100,000 shards
stats none); a shard of another size is refused, one whose mtime differs (a ``cp -r`` copy,
or a replacement) is probed again (two reads of 4 KiB) and refused by name unless its probe
is the recorded one. The record is looked up by shard id through ``record_table.py``: its
binary twin ``energon_lite.table`` when that matches the JSON's bytes, else the JSON. So a copy opens, and a replaced shard, even of
the same size, is refused. (An edit inside a shard that keeps its size and its first and
last samples is not seen, as bit rot is not: ``energon-lite lint`` decodes every sample.)
The digest gives the dataset an identity that follows its content, not its folder name.
Records written before the probes (no ``probes`` key) still open: where a shard's mtime
differs (a copy), the content digest is computed again from the files (each shard's 64 KiB
ends and its ``.tar.idx``, once per process) and must match; ``prepare --tar-index-only`` adds
the probes (same digest, so saved states still restore) and makes later opens cheap.
Energon reads ``.info.json`` strictly (unknown keys fail) but ignores other files in
``.nv-meta``, so the record lives in a file of its own. Datasets prepared without it (by
Energon) skip the check; their identity reads the sizes and both 4 KiB ends of each shard
and index once, when a loader first asks for it.

Remote datasets (``s3://``, ``msc://``, ``http(s)://``): a copy into object storage gets new
modification times, so their shards are checked by size at open (from the folder listing or
a HEAD) and by probe (two ranged GETs) the first time a process reads each shard; a remote
prepare records mtime 0. A remote prepare also records each shard's version
(``remote_versions``: its ETag, else its Last-Modified), and opening refuses a shard whose
version changed, even at the same size; opening pins the versions it saw (recorded or not: a
dataset uploaded after a local prepare has none recorded), and every ranged read is
conditional on them (``storage.ops.read_range``), so a shard replaced mid-run is refused
too. Neither the digest nor the identity involves the
dataset's location or any mtime, so a local folder and its S3 copy are the same dataset and a
state saved on one restores on the other.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from energon_lite.errors import DatasetFormatError
from energon_lite.shards.meta import META_DIR
from energon_lite.shards.record_table import TABLE, ShardRecord, encode_table, load_table
from energon_lite.shards.tar_index import (
    EDGE,
    IDX_SUFFIX,
    ShardScan,
    probe_digest,
    probe_ranges,
)
from energon_lite.storage import RemotePath, ShardFile, StoragePath, is_remote, ops

RECORD = "energon_lite.json"
RECORD_VERSION = 1
_EDGE = 4096  # bytes at each end of a shard and its index hashed without a record


def make_record(
    root: StoragePath, shard_names: list[str], scans: list[ShardScan]
) -> dict[str, Any]:
    """Sizes, mtimes (0 remotely), probes and one digest over the ``.tar.idx`` files and the
    shards' edges; the digest holds no location, no mtime and no probe."""
    digest = hashlib.blake2b(digest_size=16)
    shards: dict[str, list[int]] = {}
    probes: dict[str, list[int | str]] = {}
    crcs: dict[str, int] = {}
    for name, scan in zip(shard_names, scans):
        path = root / name
        if isinstance(path, Path):
            st = path.stat()
            size, mtime_ns = st.st_size, st.st_mtime_ns
        else:
            size, mtime_ns = ops.size(path), 0
        shards[name] = [size, mtime_ns]
        probes[name] = [int(scan.offsets[-1]), scan.probe]
        if scan.crc32 is not None:
            crcs[name] = scan.crc32
        digest.update(f"{name}\0{scan.count}\0{size}\0".encode("utf-8", "surrogateescape"))
        digest.update(scan.offsets.tobytes())
        digest.update(scan.edge_digest.encode())
    record = {
        "version": RECORD_VERSION,
        "shards": shards,
        "content_digest": digest.hexdigest(),
        "probes": probes,  # a key of its own: readers of the first records ignore it
    }
    if len(crcs) == len(shard_names):  # whole-shard CRC-32s: a key of its own, likewise
        record["crc32"] = crcs
    if is_remote(root):  # not part of the digest: a copy has other ETags
        versions = {name: ops.version(root / name) for name in shard_names}
        record["remote_versions"] = {k: v for k, v in versions.items() if v}
    return record


def write_record(meta_dir: StoragePath, record: dict[str, Any]) -> None:
    """``RECORD`` and its binary twin ``energon_lite.table`` (``record_table.py``), each
    ``NAME.tmp-PID`` + rename locally, one PUT remotely; the table names the JSON bytes it
    was made from, so a crash between the two leaves a table that opens ignore."""
    data = (json.dumps(record, indent=1) + "\n").encode("utf-8")
    ops.write_atomic(meta_dir / RECORD, data)
    table = encode_table(record, data)
    if table is not None:
        ops.write_atomic(meta_dir / TABLE, table)
    elif ops.exists(meta_dir / TABLE):
        ops.delete(meta_dir / TABLE)


def load_record(root: StoragePath, names: list[str]) -> ShardRecord | None:
    """The record by shard id (``names``: ``.info.json``'s shard order), from its table when
    one matches the JSON bytes, else from the JSON; ``None`` for a dataset prepared without
    one."""
    path = root / META_DIR / RECORD
    raw = ops.read_if_present(path)  # remotely: absent from the listing the metadata reads
    if raw is None:
        return None
    table = load_table(root / META_DIR, raw, names, path)
    if table is not None:
        return table
    try:
        data = json.loads(raw.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatasetFormatError(f"{path}: unreadable ({exc}); re-run prepare") from None
    if (
        not isinstance(data, dict)
        or data.get("version") != RECORD_VERSION
        or not isinstance(data.get("shards"), dict)
        or not isinstance(data.get("content_digest"), str)
    ):
        raise DatasetFormatError(f"{path}: not a version {RECORD_VERSION} record; re-run prepare")
    versions = data.get("remote_versions")
    return ShardRecord(
        path,
        names,
        data["content_digest"],
        parsed=data,
        versions=versions if isinstance(versions, dict) else {},
    )


def _same_mtime(a: int, b: int) -> bool:
    # a file system (or a copy) that keeps whole seconds only compares by second
    return a == b or ((a % 10**9 == 0 or b % 10**9 == 0) and a // 10**9 == b // 10**9)


def check_local_shard(root: Path, record: ShardRecord, shard_id: int) -> bool:
    """Refuse a local shard that is missing or changed since prepare (one ``stat``, and two
    4 KiB reads where its mtime differs); called when a process first reads the shard, so
    that opening a split of 100,000 shards stats none. Returns whether the shard has another
    mtime under a record without probes: the caller then checks the content digest once."""
    name = record.names[shard_id]
    size, mtime_ns = record.shard(shard_id)
    path = os.path.join(str(root), name)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise DatasetFormatError(
            f"{path}: shard is missing (deleted or a dangling link); restore it or re-run prepare"
        ) from None
    if st.st_size != size:
        raise DatasetFormatError(
            f"{path}: shard changed since prepare (size {size} -> {st.st_size} bytes); its "
            "index no longer matches it: re-run prepare (`--tar-index-only` keeps the splits)"
        )
    if _same_mtime(st.st_mtime_ns, mtime_ns):
        return False
    if not record.has_probes:  # a copy, or a replacement: the digest decides
        return True
    check_probe(root, name, record.probe(shard_id), record.where)
    return False


def check_digest(root: Path, record: ShardRecord, counts: dict[str, int], moved: str) -> None:
    """For a record without probes, where shard ``moved`` has another mtime than recorded
    (a copy, or a replacement): the content digest, computed again from the files, must match."""
    assert record.parsed is not None  # a record without probes has no table
    if not _digest_matches(root, record.parsed, counts):
        raise DatasetFormatError(
            f"{root}: a shard changed since prepare: the content digest of {record.where} no "
            f"longer matches, and shard {moved} has another mtime than recorded; the indexes "
            "may no longer match the shards: re-run prepare (`--tar-index-only` keeps the "
            "splits)"
        )


def _digest_matches(root: Path, record: dict[str, Any], counts: dict[str, int]) -> bool:
    """Recompute ``content_digest`` from the files, for a record written before the probes
    whose shards have other mtimes (a copy): each shard's edges and ``.tar.idx`` read once."""
    digest = hashlib.blake2b(digest_size=16)
    for name in record["shards"]:
        if name not in counts:
            return False
        path = root / name
        try:
            with open(path, "rb") as file:
                size = os.fstat(file.fileno()).st_size
                edges = hashlib.blake2b(file.read(EDGE), digest_size=16)
                if size > EDGE:
                    file.seek(max(EDGE, size - EDGE))
                    edges.update(file.read())
            offsets = Path(str(path) + IDX_SUFFIX).read_bytes()
        except OSError:
            return False
        digest.update(f"{name}\0{counts[name]}\0{size}\0".encode("utf-8", "surrogateescape"))
        digest.update(offsets)
        digest.update(edges.hexdigest().encode())
    return digest.hexdigest() == record["content_digest"]


def check_probe(
    root: StoragePath,
    name: str,
    entry: tuple[int, str] | None,
    where: StoragePath,
    file: ShardFile | None = None,
) -> None:
    """Read the shard's probe ranges again (through ``file`` when given: a remote shard's
    reads then share its read-ahead windows) and compare them with the record's ``entry``
    (``(end, digest)``; ``None``, a record without probes: nothing to compare remotely);
    DatasetFormatError naming the shard for a replaced one."""
    path = root / name
    if entry is None:
        return
    end, recorded = entry
    (h0, h1), (t0, t1) = probe_ranges(end)
    shard = file if file is not None else ShardFile(path)
    try:
        head = shard.pread(h1 - h0, h0) if h1 > h0 else b""
        tail = shard.pread(t1 - t0, t0) if t1 > t0 else b""
    finally:
        if file is None:
            shard.close()
    if probe_digest(end, head, tail) != recorded:
        raise DatasetFormatError(
            f"{path}: shard replaced since prepare: the same size, but its first and last "
            "samples' bytes are not those prepare indexed, so its index does not match it: "
            "re-run prepare (`--tar-index-only` keeps the splits)"
        )


def check_remote_shards(
    root: RemotePath, record: ShardRecord, shard_ids: list[int], counts: list[int]
) -> None:
    """Refuse a remote shard (or its ``.tar.idx``) that is missing or of another size than
    prepare recorded (from the folder listing: no request per shard); a copy into object
    storage has new mtimes, so those are not compared."""
    for shard_id in shard_ids:
        name = record.names[shard_id]
        recorded_size = record.shard(shard_id)[0]
        path = root / name
        try:
            size = ops.size(path)
        except DatasetFormatError:
            raise DatasetFormatError(
                f"{path}: shard is missing (deleted or never copied); restore it or re-run prepare"
            ) from None
        if size != recorded_size:
            raise DatasetFormatError(
                f"{path}: shard changed since prepare (size {recorded_size} -> {size} bytes); "
                "its index may no longer match it: re-run prepare"
            )
        idx = root / (name + IDX_SUFFIX)
        try:
            idx_size = ops.size(idx)
        except DatasetFormatError:
            raise DatasetFormatError(f"{idx}: missing tar index; re-run prepare") from None
        _check_index_size(idx, idx_size, counts[shard_id])


def _check_index_size(idx: Any, size: int, count: int) -> None:
    """A shard's ``.tar.idx`` holds one offset per sample and the end: ``count + 1`` u64s."""
    if size != (count + 1) * 8:
        raise DatasetFormatError(
            f"{idx}: has {size} bytes, expected {(count + 1) * 8} for {count} samples; "
            "re-run prepare"
        )


def remote_versions(
    root: RemotePath, record: ShardRecord | None, names: list[str]
) -> dict[str, str]:
    """The current version of each shard of ``names``, to pin for reading; a shard whose
    version differs from the one prepare recorded is refused, naming it."""
    recorded = record.remote_versions if record is not None else {}
    pinned: dict[str, str] = {}
    for name in names:
        try:
            now = ops.version(root / name)
        except DatasetFormatError:
            continue  # a missing shard is named when it is opened
        then = recorded.get(name)
        if isinstance(then, str) and then and now and now != then:
            raise ops.changed_error(root / name, then, now)
        pinned[name] = now
    return pinned


def content_identity(root: StoragePath, names: list[str]) -> str:
    """For datasets without a record: sizes and both ends (4 KiB) of each shard and index
    (the same for a local folder and its remote copy)."""
    digest = hashlib.blake2b(digest_size=16)
    for name in names:
        for path in (root / name, root / (name + IDX_SUFFIX)):
            digest.update(ops.edges(path, _EDGE) or b"missing")
    return digest.hexdigest()
