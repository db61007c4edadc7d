"""``<shard>.tar.idx``: per-shard sample offsets, written by prepare and memory-mapped by readers.

The file is a raw little-endian uint64 array: the byte offset of the first header of each
sample, then the end offset of the last member (``count + 1`` entries), exactly as
Megatron-Energon writes it.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import zlib
from array import array
from dataclasses import dataclass, field

import numpy as np

from energon_lite.errors import DatasetFormatError, short_repr
from energon_lite.storage import StoragePath, as_path
from energon_lite.storage.ops import local_copy, write_atomic

IDX_SUFFIX = ".idx"
EDGE = 1 << 16  # bytes at each end of a shard hashed into its content digest
PROBE = 4096  # bytes at each end of a shard's samples, rechecked when the shard looks moved


def probe_ranges(end: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The two byte ranges a shard's probe hashes: the first ``PROBE`` bytes (the first
    sample's headers) and the last ``PROBE`` bytes before ``end``, the end of the last
    member (the tar's zero padding after it is the same in every tar)."""
    head = min(PROBE, end)
    return (0, head), (max(head, end - PROBE), end)


def probe_digest(end: int, head: bytes, tail: bytes) -> str:
    """What prepare records per shard and an open compares: cheap to read again, and
    different for another tar of the same size (other names, mtimes, checksums, data)."""
    digest = hashlib.blake2b(f"{end}:".encode(), digest_size=16)
    digest.update(head)
    digest.update(tail)
    return digest.hexdigest()


@dataclass
class ShardScan:
    """What one pass over a shard found."""

    offsets: np.ndarray  # uint64, count + 1 entries
    parts: set[str] = field(default_factory=set)
    key_hashes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))  # per sample
    edge_digest: str = ""  # of the shard's first and last EDGE bytes: content, cheaply
    probe: str = ""  # probe_digest of the shard (see probe_ranges)
    crc32: int | None = None  # of the whole shard file: checked wherever a shard is read whole

    @property
    def count(self) -> int:
        return len(self.offsets) - 1


def scan_shard(path: str | os.PathLike[str], display_name: str | None = None) -> ShardScan:
    """Read every header of a tar shard (one sequential pass, no data copied).

    Raises DatasetFormatError naming the file (and the key) for a file that is not a tar,
    a truncated tar, or a sample key that appears twice.
    """
    from energon_lite.shards.tar import iter_members, split_name  # prepare's, not a loader's

    where = display_name or str(path)
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        raise DatasetFormatError(
            f"{where}: shard is missing (deleted while preparing, or a dangling link)"
        ) from None
    except OSError as exc:
        raise DatasetFormatError(f"{where}: cannot read shard: {exc.strerror}") from None
    if size == 0:
        raise DatasetFormatError(f"{where}: empty file, not a tar archive")
    offsets: list[int] = []
    hashes = array("Q")
    parts: set[str] = set()
    seen: set[str] = set()
    current_key: str | None = None
    current_parts: set[str] = set()
    end = 0
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        try:
            for member in iter_members(view, 0, where):
                if not _is_utf8(member.name):
                    raise DatasetFormatError(
                        f"{where}: member name {member.name!r} at byte {member.header_offset} "
                        "is not UTF-8; rename it when writing the shard"
                    )
                split = split_name(member.name)
                if split is None:
                    continue
                key, part = split
                if key != current_key:
                    if key in seen:
                        raise DatasetFormatError(
                            f"{where}: duplicate sample key {short_repr(key)}: its members are not "
                            "consecutive (a sample's parts must follow each other in the tar)"
                        )
                    seen.add(key)
                    hashes.append(key_hash(key))
                    offsets.append(member.header_offset)
                    current_key = key
                    current_parts = set()
                if part in current_parts:
                    raise DatasetFormatError(
                        f"{where}: duplicate sample key {short_repr(key)}: part "
                        f"{short_repr(part)} appears twice"
                    )
                current_parts.add(part)
                parts.add(part)
                end = member.end
            edges = hashlib.blake2b(view[:EDGE], digest_size=16)
            edges.update(view[max(EDGE, size - EDGE) :])
            (h0, h1), (t0, t1) = probe_ranges(end)
            probe = probe_digest(end, bytes(view[h0:h1]), bytes(view[t0:t1]))
            crc = zlib.crc32(view)  # one more pass over pages the scan has just read
        except UnicodeDecodeError as exc:  # a long (GNU/pax) name that is not UTF-8
            raise DatasetFormatError(
                f"{where}: a member name is not UTF-8 ({exc.object[:80]!r}); rename it when "
                "writing the shard"
            ) from None
        finally:
            view.release()
    offsets.append(end)
    return ShardScan(
        np.asarray(offsets, dtype="<u8"),
        parts,
        np.frombuffer(hashes, np.uint64),
        edges.hexdigest(),
        probe,
        crc,
    )


def key_hash(key: str) -> int:
    """64 bits of a sample key, to find keys repeated across shards without keeping them."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")


def _is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # surrogate escapes of undecodable bytes
        return False
    return True


def write_index(
    shard_path: str | os.PathLike[str] | StoragePath, offsets: np.ndarray
) -> StoragePath:
    """Write ``<shard>.tar.idx`` atomically (``NAME.tmp-PID`` + rename, or one PUT remotely)."""
    shard = as_path(shard_path)
    target = shard.with_name(shard.name + IDX_SUFFIX)
    write_atomic(target, np.asarray(offsets, dtype="<u8").tobytes())
    return target


def open_index(shard_path: str | os.PathLike[str] | StoragePath, expected_count: int) -> np.ndarray:
    """Memory-map ``<shard>.tar.idx`` (a remote one from its local cached copy); check it has
    ``expected_count + 1`` entries."""
    shard = as_path(shard_path)
    idx_path = shard.with_name(shard.name + IDX_SUFFIX)
    try:
        local = local_copy(idx_path)
        nbytes = os.path.getsize(local)
    except (FileNotFoundError, DatasetFormatError):
        raise DatasetFormatError(
            f"{idx_path}: missing tar index; run `energon-lite prepare` on the dataset"
        ) from None
    entries, rest = divmod(nbytes, 8)
    if rest or entries != expected_count + 1:
        raise DatasetFormatError(
            f"{idx_path}: has {nbytes} bytes, expected {(expected_count + 1) * 8} "
            f"({expected_count} samples + 1 end offset from .info.json); re-run prepare"
        )
    return np.memmap(local, dtype="<u8", mode="r")
