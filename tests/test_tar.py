"""The tar header parser: ustar, GNU long names, pax headers, truncation, bad headers."""

from __future__ import annotations

import io
import re
import tarfile

import pytest

from energon_lite.errors import DatasetFormatError
from energon_lite.shards.tar import first_member_name, iter_members, parse_sample, split_name


def _tar(members: list[tuple[str, bytes]], fmt: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_members_match_tarfile(fmt: int) -> None:
    long_dir = "d" * 120 if fmt != tarfile.USTAR_FORMAT else "dir/sub"
    members = [
        (f"{long_dir}/000001.jpg", b"x" * 700),
        (f"{long_dir}/000001.txt", b"hello"),
        ("k.é.json", b"{}"),
    ]
    data = _tar(members, fmt)
    ours = list(iter_members(data))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        theirs = [(m.name, m.offset, m.offset_data, m.size) for m in tar.getmembers()]
    assert [(m.name, m.header_offset, m.data_offset, m.size) for m in ours] == theirs
    assert data[ours[0].data_offset : ours[0].data_offset + 700] == b"x" * 700


def test_split_name_rules() -> None:
    assert split_name("a/b/000017.seg.jpg") == ("a/b/000017", "seg.jpg")
    assert split_name("000017.txt") == ("000017", "txt")
    assert split_name("__meta__/x.json") is None
    assert split_name("a/__index__") is None
    assert split_name("noext") is None


def test_parse_sample_and_mixed_keys() -> None:
    data = _tar([("s1.jpg", b"1"), ("s1.txt", b"a"), ("s2.jpg", b"2")], tarfile.GNU_FORMAT)
    members = list(iter_members(data))
    key, parts = parse_sample(data[: members[2].header_offset], 0, "t.tar")
    assert (key, parts) == ("s1", {"jpg": b"1", "txt": b"a"})
    with pytest.raises(
        DatasetFormatError, match=r"t.tar: byte range at 0 holds samples 's1' and 's2'"
    ):
        parse_sample(data[: members[2].end], 0, "t.tar")


def test_truncated_and_garbage() -> None:
    data = _tar([("s1.jpg", b"x" * 5000)], tarfile.GNU_FORMAT)
    with pytest.raises(
        DatasetFormatError, match=r"x.tar: truncated tar: member at byte 0 needs 5000 bytes"
    ):
        list(iter_members(data[:2000], 0, "x.tar"))
    with pytest.raises(
        DatasetFormatError, match=r"y.tar: invalid tar header at byte 0 \(bad checksum\)"
    ):
        list(iter_members(b"not a tar at all" * 64, 0, "y.tar"))
    with pytest.raises(DatasetFormatError, match="stray bytes"):
        list(iter_members(data[: 512 * 11 + 100], 0, "z.tar"))


def _block(name: str, type_: bytes, size: int) -> bytes:
    """One ustar header block with a correct checksum (tarfile writes the fields)."""
    info = tarfile.TarInfo(name)
    info.type, info.size = type_, size
    return info.tobuf(tarfile.USTAR_FORMAT)


def _padded(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 512)


def _with_pax(records: bytes, name: str = "s1.jpg", data: bytes = b"payload") -> bytes:
    """A pax extended header carrying ``records``, then a regular member, then the end marker."""
    return (
        _block("././@PaxHeader", tarfile.XHDTYPE, len(records))
        + _padded(records)
        + _block(name, tarfile.REGTYPE, len(data))
        + _padded(data)
        + b"\0" * 1024
    )


def _pax_record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n".encode()
    length = len(body) + 1
    length += len(str(length + len(str(length)))) - 1
    return str(length).encode() + body


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("records", "problem"),
    [
        # -1536 steps back to byte 0: the old parser looped there forever
        (_pax_record("size", "-1536"), "pax header before byte 1024 has size '-1536'"),
        (_pax_record("size", "99999999999"), "member at byte 1024 needs 99999999999 bytes"),
        (_pax_record("size", "1e3"), "has size '1e3'"),
        (b"99 path=x\n", "pax header at byte 0: malformed record at offset 0"),
        (b"-5 path=x\n", "malformed record"),
        (b"3 path=x\n", "malformed record"),
        (b"11 pathx\n\n\n", "has no key=value"),
        (b"14 path=\xff.jpg\n", "pax path at byte 0 is not UTF-8"),
    ],
)
def test_bad_pax_headers_are_format_errors(records: bytes, problem: str) -> None:
    with pytest.raises(DatasetFormatError, match=re.escape(problem)) as caught:
        list(iter_members(_with_pax(records), 0, "s.tar"))
    assert str(caught.value).startswith("s.tar: ")


@pytest.mark.timeout(30)
def test_bad_sizes_names_and_numbers(tmp_path) -> None:
    good = _tar([("s1.jpg", b"x" * 100)], tarfile.USTAR_FORMAT)

    def patched(offset: int, field: bytes) -> bytes:
        header = bytearray(good[:512])
        header[offset : offset + len(field)] = field
        header[148:156] = b" " * 8
        header[148:156] = f"{sum(header):06o}\0 ".encode()
        return bytes(header) + good[512:]

    negative = patched(124, b"\xff" * 12)  # GNU base-256, negative
    with pytest.raises(DatasetFormatError, match=r"t.tar: tar header at byte 0: field size"):
        list(iter_members(negative, 0, "t.tar"))
    mtime = patched(136, b"12x4567\0")
    with pytest.raises(DatasetFormatError, match=r"field mtime = b'12x4567\\x00"):
        list(iter_members(mtime, 0, "t.tar"))
    latin = patched(0, b"caf\xe9.jpg\0")
    with pytest.raises(DatasetFormatError, match=r"member name at byte 0 is not UTF-8"):
        list(iter_members(latin, 0, "t.tar"))
    long_name = _block("././@LongLink", tarfile.GNUTYPE_LONGNAME, 2**30) + good
    with pytest.raises(DatasetFormatError, match=r"extended header at byte 0 claims 1073741824"):
        list(iter_members(long_name, 0, "t.tar"))
    # the header-only lookup (dataset exclusions) validates the same way and never loops
    shard = tmp_path / "n.tar"
    shard.write_bytes(_with_pax(_pax_record("size", "-1024")))
    with open(shard, "rb") as file:
        with pytest.raises(DatasetFormatError, match=r"n.tar: pax header before byte 1024"):
            first_member_name(file.fileno(), 0, str(shard))
        shard.write_bytes(_with_pax(_pax_record("path", "k.txt")))
        assert first_member_name(file.fileno(), 0, str(shard)) == "k.txt"


def _walked(buf: bytes) -> tuple[str, dict[str, bytes]]:
    """A sample's key and parts from ``iter_members``: the general walk, member by member."""
    key, parts = None, {}
    for member in iter_members(buf, 0, "s.tar"):
        split = split_name(member.name)
        if split is None:
            continue
        if key is not None and split[0] != key:
            raise DatasetFormatError(f"s.tar: byte range at 0 holds samples {key!r} and more")
        key = split[0]
        parts[split[1]] = buf[member.data_offset : member.data_offset + member.size]
    if key is None:
        raise DatasetFormatError("s.tar: no sample at byte 0; the .tar.idx is stale")
    return key, parts


def _outcome(parse, buf: bytes) -> object:
    try:
        return parse(buf)
    except (DatasetFormatError, ValueError) as exc:
        return type(exc)  # the messages name the same problem; the class is what callers see


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_parse_sample_agrees_with_the_member_walk_on_damaged_headers(fmt: int) -> None:
    """``parse_sample`` reads plain samples in one loop of its own; on any header byte changed
    it still gives what the member walk gives (the parts, or an error)."""
    data = _tar([("a/s1.jpg", b"j" * 700), ("a/s1.txt", b"caption"), ("__meta__/x", b"m")], fmt)
    sample = data[: list(iter_members(data))[-1].end]  # a sample's range, as a .tar.idx cuts
    want = ("a/s1", {"jpg": b"j" * 700, "txt": b"caption"})
    assert parse_sample(sample, 0, "s.tar") == _walked(sample) == want
    headers = [m.data_offset - 512 for m in iter_members(sample)]
    for header in headers:
        for at in range(512):
            for value in (0, 0x20, 0x37, 0x41, 0x80, 0xFF):
                for resum in (False, True):  # with the checksum made right again: the
                    damaged = bytearray(sample)  # checks after it see the damage
                    damaged[header + at] = value
                    if resum and not 148 <= at < 156:
                        block = damaged[header : header + 512]
                        block[148:156] = b" " * 8
                        damaged[header + 148 : header + 156] = b"%06o\0 " % sum(block)
                    buf = bytes(damaged)
                    assert _outcome(lambda b: parse_sample(b, 0, "s.tar"), buf) == _outcome(
                        _walked, buf
                    ), (header, at, value, resum)
    for cut in (100, 512, 1000, 1536, len(sample) - 1):
        assert _outcome(lambda b: parse_sample(b, 0, "s.tar"), sample[:cut]) == _outcome(
            _walked, sample[:cut]
        )
