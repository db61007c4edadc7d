"""The tar header parser: ustar, GNU long names, pax headers, truncation, bad headers."""

from __future__ import annotations

import io
import tarfile

import pytest

from energon_lite.errors import DatasetFormatError
from energon_lite.index.tar import iter_members, parse_sample, split_name


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
