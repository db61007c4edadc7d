"""A resumable prepare: the scans of finished shards, kept until ``.nv-meta`` is written.

A prepare of an object-store prefix (or one run on a cluster) scans its shards in batches of
``BATCH`` consecutive shards (``ENERGON_LITE_PREPARE_BATCH``). As each batch's scans come
back, the driver writes them to ``<root>/.energon-lite-prepare/batch-<n>-<names digest>.npz``
(one object: offsets, key hashes, parts, edge digests, probes, and each shard's identity:
size and ETag/generation remotely, size and mtime locally). A prepare that dies part-way
(killed, a store that stopped answering, a bad shard) leaves these behind; the next prepare
of the same folder takes every batch whose shards are unchanged from the journal and scans
only the others. A batch whose shard list or any shard's identity differs is scanned again.
The journal is deleted once ``.nv-meta`` is written, and holds no ``.tar`` or ``.nv-meta``
name, so it is never taken for a shard or for metadata.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from energon_lite.errors import DatasetFormatError
from energon_lite.shards.tar_index import ShardScan
from energon_lite.storage import StoragePath, ops

JOURNAL_DIR = ".energon-lite-prepare"


def batch_size() -> int:
    value = os.environ.get("ENERGON_LITE_PREPARE_BATCH", "32")
    try:
        size = int(value)
    except ValueError:
        size = 0
    if size < 1:
        raise DatasetFormatError(f"ENERGON_LITE_PREPARE_BATCH={value!r}: a whole number >= 1")
    return size


def batches(shards: Sequence[str]) -> list[list[str]]:
    """The shards in batches of :func:`batch_size`, in order (batch ``n`` is the n-th)."""
    size = batch_size()
    return [list(shards[i : i + size]) for i in range(0, len(shards), size)]


def identity(path: StoragePath) -> str:
    """What a shard is now: its size and mtime, or its size and ETag/generation remotely."""
    if isinstance(path, Path):
        st = path.stat()
        return f"{st.st_size}:{st.st_mtime_ns}"
    return f"{ops.size(path)}:{ops.version(path) or ops.stat(path)[0]}"


def _name(index: int, names: Sequence[str]) -> str:
    digest = hashlib.blake2b("\n".join(names).encode("utf-8", "surrogateescape"), digest_size=8)
    return f"batch-{index:06d}-{digest.hexdigest()}.npz"


def encode(names: Sequence[str], identities: Sequence[str], scans: Sequence[ShardScan]) -> bytes:
    header = {
        "names": list(names),
        "identities": list(identities),
        "parts": [sorted(scan.parts) for scan in scans],
        "edge_digests": [scan.edge_digest for scan in scans],
        "probes": [scan.probe for scan in scans],
        "offset_lengths": [len(scan.offsets) for scan in scans],
        "hash_lengths": [len(scan.key_hashes) for scan in scans],
    }
    buffer = io.BytesIO()
    np.savez(
        buffer,
        header=np.frombuffer(json.dumps(header).encode("utf-8", "surrogateescape"), np.uint8),
        offsets=np.concatenate([scan.offsets.astype(np.uint64) for scan in scans]),
        hashes=np.concatenate([scan.key_hashes.astype(np.uint64) for scan in scans]),
    )
    return buffer.getvalue()


def decode(data: bytes) -> tuple[list[str], list[str], list[ShardScan]]:
    with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
        header = json.loads(arrays["header"].tobytes().decode("utf-8", "surrogateescape"))
        offsets, hashes = arrays["offsets"], arrays["hashes"]
    scans, at, hat = [], 0, 0
    for i in range(len(header["names"])):
        n, h = header["offset_lengths"][i], header["hash_lengths"][i]
        scans.append(
            ShardScan(
                offsets=offsets[at : at + n].copy(),
                parts=set(header["parts"][i]),
                key_hashes=hashes[hat : hat + h].copy(),
                edge_digest=header["edge_digests"][i],
                probe=header["probes"][i],
            )
        )
        at, hat = at + n, hat + h
    return header["names"], header["identities"], scans


class Journal:
    """The finished batches of one dataset folder's prepare."""

    def __init__(self, root: StoragePath) -> None:
        self.root = root
        self.folder = root / JOURNAL_DIR
        ops.forget_under(root)  # the shards' identities as they are now
        if isinstance(self.folder, Path):
            self._present = {p.name for p in self.folder.glob("batch-*.npz")}
        else:  # one listing of the prefix
            self._present = set(ops.list_files(self.folder, ".npz"))

    def load(self, index: int, names: Sequence[str]) -> list[ShardScan] | None:
        """The batch's scans, if it was finished and its shards are unchanged."""
        name = _name(index, names)
        if name not in self._present:
            return None
        try:
            saved_names, identities, scans = decode(ops.read_range_all(self.folder / name))
        except (OSError, ValueError, KeyError, DatasetFormatError):
            return None  # a torn or foreign file: scan the batch again
        if saved_names != list(names):
            return None
        if identities != [identity(self.root / n) for n in names]:
            return None
        return scans

    def save(self, index: int, names: Sequence[str], scans: Sequence[ShardScan]) -> None:
        identities = [identity(self.root / n) for n in names]
        ops.write_atomic(self.folder / _name(index, names), encode(names, identities, scans))

    def clear(self) -> None:
        """Remove the journal (after ``.nv-meta`` was written)."""
        if isinstance(self.folder, Path):
            for path in self.folder.glob("*"):
                path.unlink(missing_ok=True)
            if self.folder.is_dir():
                self.folder.rmdir()
            return
        for name in ops.list_files(self.folder, ""):
            ops.delete(self.folder / name)
