"""Tar parsing without ``tarfile``: member headers from a buffer, and whole-shard scans.

A WebDataset shard is a plain tar whose members are grouped into samples by key: the
member path up to the first ``.`` of its base name (``a/b/000017.seg.jpg`` -> key
``a/b/000017``, part ``seg.jpg``). Members in ``__meta__``-style paths are skipped.

``iter_members`` understands ustar, GNU long names (``L``) and pax extended headers (``x``,
``g``), which is what Python's ``tarfile`` and GNU tar write. Reading a sample is one
``pread`` of its byte range (from ``.tar.idx``) and this parser over the bytes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import NamedTuple, Protocol

from energon_lite.errors import DatasetFormatError

BLOCK = 512
_SPLIT_NAME = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_SKIP_META = re.compile(r"__[^/]*__($|/)")
_REGULAR = (b"0", b"\0", b"7")


class Member(NamedTuple):
    name: str
    header_offset: int  # offset of the first header block (extended headers included)
    data_offset: int
    size: int
    end: int  # offset just after the padded data


def split_name(name: str) -> tuple[str, str] | None:
    """``(key, part)`` of a member path, or None for members that belong to no sample."""
    if _SKIP_META.search(name):
        return None
    match = _SPLIT_NAME.match(name)
    if match is None:
        return None
    return match.group(1), match.group(2)


def _octal(field: bytes, where: str) -> int:
    if field and field[0] & 0x80:  # GNU base-256 for sizes >= 8 GiB
        return int.from_bytes(field[1:], "big")
    text = field.rstrip(b" \0").strip()
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise DatasetFormatError(f"{where}: bad number {field!r} in tar header") from None


def _checksum_ok(header: bytes) -> bool:
    stored = header[148:156].rstrip(b" \0").strip()
    if not stored:
        return False
    try:
        expected = int(stored, 8)
    except ValueError:
        return False
    unsigned = sum(header[:148]) + 8 * 32 + sum(header[156:])
    return expected == unsigned


def _pax_records(data: bytes) -> dict[str, str]:
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        space = data.find(b" ", pos)
        if space < 0:
            break
        length = int(data[pos:space])
        if length <= 0:
            break
        key, _, value = data[space + 1 : pos + length - 1].partition(b"=")
        records[key.decode("utf-8")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return records


def iter_members(buf: bytes | memoryview, base: int = 0, where: str = "tar") -> Iterator[Member]:
    """Yield the regular-file members of the tar bytes ``buf`` (which start at file offset ``base``).

    Stops at the end-of-archive marker or the end of ``buf``. Raises DatasetFormatError for
    a header with a bad checksum or a member that runs past the end of ``buf``.
    """
    pos = 0
    total = len(buf)
    long_name: str | None = None
    pax: dict[str, str] = {}
    first_header: int | None = None
    while pos + BLOCK <= total:
        header = bytes(buf[pos : pos + BLOCK])
        if header.count(0) == BLOCK:
            return
        if not _checksum_ok(header):
            raise DatasetFormatError(
                f"{where}: invalid tar header at byte {base + pos} (bad checksum): "
                "the file is not a tar archive or is corrupt"
            )
        if first_header is None:
            first_header = pos
        typeflag = header[156:157]
        size = _octal(header[124:136], where)
        data_start = pos + BLOCK
        end = data_start + (size + BLOCK - 1) // BLOCK * BLOCK
        if data_start + size > total:
            raise DatasetFormatError(
                f"{where}: truncated tar: member at byte {base + pos} needs {size} bytes of data "
                f"but the file ends at byte {base + total}"
            )
        if typeflag == b"L":
            long_name = bytes(buf[data_start : data_start + size]).rstrip(b"\0").decode("utf-8")
        elif typeflag == b"x":
            pax = _pax_records(bytes(buf[data_start : data_start + size]))
        elif typeflag == b"g":
            first_header = None
        else:
            if typeflag in _REGULAR:
                if "size" in pax:
                    size = int(pax["size"])
                    end = data_start + (size + BLOCK - 1) // BLOCK * BLOCK
                name = pax.get("path") or long_name
                if name is None:
                    name = header[0:100].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
                    if header[257:262] == b"ustar":
                        prefix = header[345:500].split(b"\0", 1)[0]
                        if prefix:
                            name = prefix.decode("utf-8", "surrogateescape") + "/" + name
                yield Member(name, base + first_header, base + data_start, size, base + end)
            long_name = None
            pax = {}
            first_header = None
        pos = end
    if pos < total:
        raise DatasetFormatError(
            f"{where}: truncated tar: {total - pos} stray bytes at byte {base + pos}, "
            "less than one header block"
        )


def parse_sample(buf: bytes | memoryview, base: int, where: str) -> tuple[str, dict[str, bytes]]:
    """The key and ``{part: bytes}`` of the one sample whose members fill ``buf``."""
    key: str | None = None
    parts: dict[str, bytes] = {}
    for member in iter_members(buf, base, where):
        split = split_name(member.name)
        if split is None:
            continue
        member_key, part = split
        if key is None:
            key = member_key
        elif member_key != key:
            raise DatasetFormatError(
                f"{where}: byte range at {base} holds samples {key!r} and {member_key!r}; "
                "the .tar.idx does not match the tar (re-run prepare)"
            )
        start = member.data_offset - base
        parts[part] = bytes(buf[start : start + member.size])
    if key is None:
        raise DatasetFormatError(f"{where}: no sample at byte {base}; the .tar.idx is stale")
    return key, parts


class _Preadable(Protocol):
    def pread(self, size: int, offset: int) -> bytes: ...


def first_member_name(fd: int | _Preadable, offset: int, where: str) -> str:
    """The path of the first regular member whose headers start at ``offset`` (headers only);
    ``fd`` is a file descriptor or an object with ``pread(size, offset)`` (a remote shard)."""
    pread = fd.pread if not isinstance(fd, int) else lambda n, at: os.pread(fd, n, at)
    long_name: str | None = None
    pax: dict[str, str] = {}
    while True:
        header = pread(BLOCK, offset)
        if len(header) < BLOCK or not _checksum_ok(header):
            raise DatasetFormatError(f"{where}: no valid tar header at byte {offset}")
        typeflag = header[156:157]
        size = _octal(header[124:136], where)
        data = offset + BLOCK
        if typeflag == b"L":
            long_name = pread(size, data).rstrip(b"\0").decode("utf-8")
        elif typeflag == b"x":
            pax = _pax_records(pread(size, data))
        elif typeflag in _REGULAR:
            name = pax.get("path") or long_name
            if name is None:
                name = header[0:100].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
                if header[257:262] == b"ustar":
                    prefix = header[345:500].split(b"\0", 1)[0]
                    if prefix:
                        name = prefix.decode("utf-8", "surrogateescape") + "/" + name
            return name
        offset = data + (size + BLOCK - 1) // BLOCK * BLOCK
