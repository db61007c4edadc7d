"""``.nv-meta/key_index.npy``: sample key -> (shard, index) for random access by file name.

A prepared dataset's ``.tar.idx`` files give each sample's offset but not its key. Reading a
sample by name (an aux source, ``primary.get("000102.txt")``) needs the reverse map. It is
built once, from one tar header per sample (``pread`` of 512 bytes, no data read), and saved
atomically beside the dataset's other metadata as a structured numpy array sorted by a
64-bit hash of the key: ``(hash, shard_id, index)``. A lookup is a binary search in the
memory-mapped array plus the check that the sample read really has that key, so hash
collisions are resolved by trying the neighbours with the same hash.

A dataset on remote storage is not written to: its ``key_index.npy`` is taken from the bucket
when prepare put one there, else built (reading the headers with ranged GETs) and kept in the
local index cache (``ENERGON_LITE_CACHE_DIR``), named by the dataset's URL, its shard
list and counts and its shards' ETags and sizes, so a dataset changed since is indexed again.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os

import numpy as np

from energon_lite.errors import DatasetFormatError
from energon_lite.shards.meta import META_DIR, load_info
from energon_lite.shards.tar import first_member_name, split_name
from energon_lite.shards.tar_index import open_index
from energon_lite.storage import RemotePath, ShardFile, StoragePath, is_remote, ops

FILE_NAME = "key_index.npy"
DTYPE = np.dtype([("hash", "<u8"), ("shard", "<u4"), ("index", "<u8")])
logger = logging.getLogger("energon_lite")


def key_hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")


def build_key_index(root: StoragePath) -> np.ndarray:
    """Read the first header name of every sample of every shard (all splits)."""
    info = load_info(root)
    total = sum(info.shard_counts)
    table = np.empty(total, dtype=DTYPE)
    row = 0
    for shard_id, (name, count) in enumerate(zip(info.shard_names, info.shard_counts)):
        path = root / name
        offsets = open_index(path, count)
        shard = ShardFile(path, ops.version(path))
        try:
            for index in range(count):
                split = split_name(first_member_name(shard, int(offsets[index]), str(path)))
                if split is None:
                    raise DatasetFormatError(
                        f"{path}: sample {index} starts with a non-sample member"
                    )
                table[row] = (key_hash(split[0]), shard_id, index)
                row += 1
        finally:
            shard.close()
    table.sort(order="hash", kind="stable")
    return table


def load_key_index(root: StoragePath) -> np.ndarray:
    """The key index of a prepared dataset, built and saved on first use."""
    if is_remote(root):  # nothing is written beside a remote dataset
        return _remote_key_index(root)
    path = root / META_DIR / FILE_NAME
    if path.is_file():
        table = np.load(path, mmap_mode="r")
        info = root / META_DIR / ".info.json"
        fresh = not info.is_file() or path.stat().st_mtime >= info.stat().st_mtime
        if fresh and len(table) == sum(load_info(root).shard_counts):
            return table
    table = build_key_index(root)
    tmp = path.with_name(f"{FILE_NAME}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as file:
            np.save(file, table)
        os.replace(tmp, path)
    except OSError as exc:  # a read-only dataset: keep the table in memory
        tmp.unlink(missing_ok=True)
        logger.warning("%s: cannot save the key index (%s); rebuilt per process", path, exc)
    return table


def _remote_key_index(root: RemotePath) -> np.ndarray:
    info = load_info(root)
    total = sum(info.shard_counts)
    stored = root / META_DIR / FILE_NAME
    if ops.exists(stored):
        table = np.load(ops.local_copy(stored), mmap_mode="r")
        if len(table) == total:
            return table
    identity = hashlib.sha256(str(root).encode())
    identity.update(repr((info.shard_names, info.shard_counts)).encode())
    for name in info.shard_names:
        identity.update(repr(ops.stat(root / name)).encode())
    local = ops.cache_dir() / f"key-index-{identity.hexdigest()[:40]}.npy"
    if local.is_file():
        return np.load(local, mmap_mode="r")
    table = build_key_index(root)
    buffer = io.BytesIO()
    np.save(buffer, table)
    ops.write_atomic(local, buffer.getvalue())
    return table


def candidates(table: np.ndarray, key: str) -> list[tuple[int, int]]:
    """``(shard_id, index)`` of the samples whose key hash equals ``key``'s."""
    target = np.uint64(key_hash(key))
    hashes = table["hash"]
    lo = int(np.searchsorted(hashes, target, side="left"))
    hi = int(np.searchsorted(hashes, target, side="right"))
    return [(int(table["shard"][i]), int(table["index"][i])) for i in range(lo, hi)]
