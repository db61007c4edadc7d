"""Tar parsing without ``tarfile``: member headers from a buffer or a file, validated.

A WebDataset shard is a plain tar whose members are grouped into samples by key: the
member path up to the first ``.`` of its base name (``a/b/000017.seg.jpg`` -> key
``a/b/000017``, part ``seg.jpg``). Members in ``__meta__``-style paths are skipped.

One header walker (``_walk``) understands ustar, GNU long names (``L``) and pax extended
headers (``x``, ``g``), which is what Python's ``tarfile`` and GNU tar write; it serves both
the buffer parser (``iter_members``: a sample's one ``pread``, or a whole mapped shard) and
the header-only lookup (``first_member_name``). A shard is untrusted input, so every field the
walker uses is checked before it is used: the checksum, the numeric fields (octal digits, or
GNU base-256 that is not negative), sizes against the end of the file, pax record lengths,
keys and values, names (UTF-8, not empty, no NUL) and offsets that move strictly forward.
Anything else is a ``DatasetFormatError`` naming the shard and the byte offset, never a loop.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Callable, Iterator
from typing import NamedTuple, Protocol

from energon_lite.errors import DatasetFormatError, short_repr

BLOCK = 512
MAX_EXTENDED_HEADER = 1 << 20  # a GNU long name or pax header above 1 MiB is not a real one
_SPLIT_NAME = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_SKIP_META = re.compile(r"__[^/]*__($|/)")
_REGULAR = (b"0", b"\0", b"7")
_NUMERIC_FIELDS = (("mode", 100, 108), ("uid", 108, 116), ("gid", 116, 124), ("mtime", 136, 148))
_PLAIN_NUMBERS = re.compile(rb"[0-7 \0]{48}")  # mode, uid, gid, size, mtime (bytes 100-148)
_OCTAL = re.compile(rb"[0-7]*")
_DECIMAL = re.compile(rb"[0-9]+")
_OCTAL_DIGITS = b"01234567"
_PLAIN_BYTES = b"01234567 \0"  # what _PLAIN_NUMBERS allows


class Member(NamedTuple):
    name: str
    header_offset: int  # offset of the first header block (extended headers included)
    data_offset: int
    size: int
    end: int  # offset just after the padded data


def split_name(name: str) -> tuple[str, str] | None:
    """``(key, part)`` of a member path, or None for members that belong to no sample."""
    if "__" in name and _SKIP_META.search(name):  # the pattern needs "__": most names skip it
        return None
    match = _SPLIT_NAME.match(name)
    if match is None:
        return None
    return match.group(1), match.group(2)


def iter_members(buf: bytes | memoryview, base: int = 0, where: str = "tar") -> Iterator[Member]:
    """Yield the regular-file members of the tar bytes ``buf`` (which start at file offset ``base``).

    Stops at the end-of-archive marker or the end of ``buf``. Raises DatasetFormatError for
    a malformed header or a member that runs past the end of ``buf``.
    """

    def read(offset: int, size: int) -> bytes:
        return bytes(buf[offset - base : offset - base + size])

    return _walk(read, base, base + len(buf), where)


def parse_sample(buf: bytes | memoryview, base: int, where: str) -> tuple[str, dict[str, bytes]]:
    """The key and ``{part: bytes}`` of the one sample whose members fill ``buf``."""
    plain = _plain_sample(buf)
    if plain is not None:
        return plain
    # anything else (extended headers, other member types, any check failing): the general
    # walk, which gives the same result or names what is wrong
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
                f"{where}: byte range at {base} holds samples {short_repr(key)} and "
                f"{short_repr(member_key)}; the .tar.idx does not match the tar (re-run prepare)"
            )
        start = member.data_offset - base
        parts[part] = bytes(buf[start : start + member.size])
    if key is None:
        raise DatasetFormatError(f"{where}: no sample at byte {base}; the .tar.idx is stale")
    return key, parts


def _plain_sample(buf: bytes | memoryview) -> tuple[str, dict[str, bytes]] | None:
    """``parse_sample``'s common case in one loop: every member a ustar regular file with
    plain octal numbers, every check of ``_walk`` passed, one key. None for anything else,
    which ``parse_sample`` then walks the general way. Called for every sample read, so the
    checks are C calls (``bytes.translate`` deleting the allowed bytes in place of the
    regular expressions) and there is no generator, closure or ``Member`` per member."""
    view = memoryview(buf)
    stop = len(view)
    key: str | None = None
    parts: dict[str, bytes] = {}
    pos = 0
    while pos + BLOCK <= stop:
        header = bytes(view[pos : pos + BLOCK])
        if not header[0] or header[156:157] not in _REGULAR:
            return None  # end of archive, extended headers, other types: the general walk
        stored = header[148:156].replace(b"\0", b" ").strip()
        if (
            not stored
            or stored.translate(None, _OCTAL_DIGITS)
            or int(stored, 8) != _byte_sum(header)
        ):
            return None
        if header[100:148].translate(None, _PLAIN_BYTES):
            return None  # base-256 numbers or garbage
        size_text = header[124:136].replace(b"\0", b" ").strip()
        if not size_text or size_text.translate(None, _OCTAL_DIGITS):
            return None
        size = int(size_text, 8)
        start = pos + BLOCK
        end = start + (size + BLOCK - 1) // BLOCK * BLOCK
        if start + size > stop:
            return None
        raw = header[0:100].split(b"\0", 1)[0]
        if header[257:262] == b"ustar":
            prefix = header[345:500].split(b"\0", 1)[0]
            if prefix:
                raw = prefix + b"/" + raw
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if not name or "\0" in name:
            return None
        split = split_name(name)
        if split is not None:
            if key is None:
                key = split[0]
            elif split[0] != key:
                return None
            parts[split[1]] = bytes(view[start : start + size])
        pos = end
    if pos < stop or key is None:
        return None
    return key, parts


class _Shard(Protocol):
    @property
    def size(self) -> int: ...

    def pread(self, size: int, offset: int) -> bytes: ...


def first_member_name(fd: int | _Shard, offset: int, where: str) -> str:
    """The path of the first regular member whose headers start at ``offset`` (headers only);
    ``fd`` is a file descriptor or a shard with ``pread(size, offset)`` and ``size`` (remote)."""

    def read(at: int, size: int) -> bytes:
        return os.pread(fd, size, at) if isinstance(fd, int) else fd.pread(size, at)

    stop = os.fstat(fd).st_size if isinstance(fd, int) else fd.size
    for member in _walk(read, offset, stop, where, data=False):
        return member.name
    raise DatasetFormatError(f"{where}: no tar member at byte {offset}")


def _walk(
    read: Callable[[int, int], bytes], start: int, stop: int, where: str, data: bool = True
) -> Iterator[Member]:
    """Regular members between file offsets ``start`` and ``stop`` (``read(offset, size)``).

    ``data=False`` stops before the end check of the last member's data (header lookups).
    """
    pos = start
    long_name: str | None = None
    pax: dict[str, str] = {}
    first_header: int | None = None
    while pos + BLOCK <= stop:
        header = read(pos, BLOCK)
        if len(header) < BLOCK:
            raise DatasetFormatError(f"{where}: truncated tar header at byte {pos}")
        if not header[0] and header.count(0) == BLOCK:  # a name's first byte is never NUL
            return
        _check_checksum(header, pos, where)
        if _PLAIN_NUMBERS.fullmatch(header, 100, 148):  # the common case: octal digits only
            text = header[124:136].replace(b"\0", b" ").strip()
            size = int(text, 8) if _OCTAL.fullmatch(text) else _number(text, "size", pos, where)
        else:  # base-256 numbers, or garbage: field by field
            for field, begin, end in _NUMERIC_FIELDS:
                _number(header[begin:end], field, pos, where)
            size = _number(header[124:136], "size", pos, where)
        if first_header is None:
            first_header = pos
        typeflag = header[156:157]
        data_start = pos + BLOCK
        if typeflag in (b"L", b"x", b"g"):
            if size > MAX_EXTENDED_HEADER:
                raise DatasetFormatError(
                    f"{where}: tar extended header at byte {pos} claims {size} bytes "
                    f"(at most {MAX_EXTENDED_HEADER}); the shard is corrupt"
                )
            _check_fits(data_start, size, stop, pos, where)
            payload = read(data_start, size)
            if typeflag == b"L":
                long_name = _name(payload.rstrip(b"\0"), "GNU long name", pos, where)
            elif typeflag == b"x":
                pax = _pax_records(payload, pos, where)
            else:  # a global header belongs to no member
                first_header = None
        elif typeflag in _REGULAR:
            if "size" in pax:
                text = pax["size"].encode()
                if not _DECIMAL.fullmatch(text):
                    raise DatasetFormatError(
                        f"{where}: pax header before byte {pos} has size "
                        f"{short_repr(pax['size'])}; expected a decimal number >= 0"
                    )
                size = int(text)
            if data:
                _check_fits(data_start, size, stop, pos, where)
            name = pax.get("path") or long_name or _ustar_name(header, pos, where)
            yield Member(name, first_header, data_start, size, _padded_end(data_start, size))
            long_name, pax, first_header = None, {}, None
        else:  # directories, links, devices: belong to no sample
            _check_fits(data_start, size, stop, pos, where)
            long_name, pax, first_header = None, {}, None
        end = _padded_end(data_start, size)
        assert end > pos  # sizes are >= 0, so every step moves forward
        pos = end
    if data and pos < stop:
        raise DatasetFormatError(
            f"{where}: truncated tar: {stop - pos} stray bytes at byte {pos}, "
            "less than one header block"
        )


def _padded_end(data_start: int, size: int) -> int:
    return data_start + (size + BLOCK - 1) // BLOCK * BLOCK


def _check_fits(data_start: int, size: int, stop: int, pos: int, where: str) -> None:
    if data_start + size > stop:
        raise DatasetFormatError(
            f"{where}: truncated tar: member at byte {pos} needs {size} bytes of data "
            f"but the file ends at byte {stop}"
        )


def _byte_sum(header: bytes) -> int:
    """The tar checksum: the header's bytes summed with the checksum field read as spaces.

    In C: Adler-32's low half is 1 + the bytes' sum modulo 65521, which is the exact sum for
    runs of at most 256 bytes (<= 65280); three runs cover the header (~0.7 us against ~4 us
    for Python's ``sum`` over 512 bytes, twice per sample)."""
    view = memoryview(header)
    # written out, not a generator over the runs: this runs for every member of every sample
    return (
        (zlib.adler32(view[:148]) & 0xFFFF)
        + (zlib.adler32(view[156:356]) & 0xFFFF)
        + (zlib.adler32(view[356:BLOCK]) & 0xFFFF)
        + (8 * 32 - 3)
    )


def _check_checksum(header: bytes, pos: int, where: str) -> None:
    stored = header[148:156].replace(b"\0", b" ").strip()
    if not stored or not _OCTAL.fullmatch(stored) or int(stored, 8) != _byte_sum(header):
        raise DatasetFormatError(
            f"{where}: invalid tar header at byte {pos} (bad checksum): "
            "the file is not a tar archive or is corrupt"
        )


def _number(field: bytes, what: str, pos: int, where: str) -> int:
    """An octal header field (NUL/space padded) or GNU base-256 (first byte 0x80)."""
    if field[:1] == b"\x80":
        return int.from_bytes(field[1:], "big")
    text = field.replace(b"\0", b" ").strip()
    if field[:1] == b"\xff" or not _OCTAL.fullmatch(text):  # 0xff: a negative base-256 number
        raise DatasetFormatError(
            f"{where}: tar header at byte {pos}: field {what} = {short_repr(field)} is not "
            "a number >= 0"
        )
    return int(text, 8) if text else 0


def _name(raw: bytes, what: str, pos: int, where: str) -> str:
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DatasetFormatError(
            f"{where}: {what} at byte {pos} is not UTF-8: {short_repr(raw)}; rename the member"
        ) from None
    if not name or "\0" in name:
        raise DatasetFormatError(
            f"{where}: {what} at byte {pos} is empty or holds a NUL byte: {short_repr(raw)}"
        )
    return name


def _ustar_name(header: bytes, pos: int, where: str) -> str:
    raw = header[0:100].split(b"\0", 1)[0]
    if header[257:262] == b"ustar":
        prefix = header[345:500].split(b"\0", 1)[0]
        if prefix:
            raw = prefix + b"/" + raw
    return _name(raw, "member name", pos, where)


def _pax_records(data: bytes, pos: int, where: str) -> dict[str, str]:
    """``"LEN key=value\\n"`` records; LEN counts the whole record, its own digits included."""
    records: dict[str, str] = {}
    at = 0
    while at < len(data):
        if data[at:].strip(b"\0") == b"":  # padding after the last record
            break
        space = data.find(b" ", at, at + 21)
        digits = data[at:space] if space > at else b""
        length = int(digits) if _DECIMAL.fullmatch(digits) else 0
        record = data[at : at + length]
        if length <= len(digits) + 1 or at + length > len(data) or record[-1:] != b"\n":
            raise DatasetFormatError(
                f"{where}: pax header at byte {pos}: malformed record at offset {at} "
                f"({short_repr(data[at : at + 40])}); expected 'LENGTH key=value\\n'"
            )
        key, eq, value = record[len(digits) + 1 : -1].partition(b"=")
        if not eq or not key:
            raise DatasetFormatError(
                f"{where}: pax header at byte {pos}: record {short_repr(record)} has no key=value"
            )
        name = _name(key, "pax key", pos, where)
        if name == "path" or name == "size":
            records[name] = _name(value, f"pax {name}", pos, where)
        at += length
    return records
