"""Seeded fuzzing of untrusted inputs: tar headers and metadataset YAML.

Each test mutates a real, valid input a few hundred times (fixed seeds, so a failure names a
reproducible case) and checks that energon_lite either parses the result consistently or
raises one of its own error types: never a raw exception, and never a hang (the pytest
timeout bounds each test).
"""

from __future__ import annotations

import contextlib
import io
import random
import tarfile
from pathlib import Path

import pytest

from energon_lite.errors import DatasetFormatError
from energon_lite.index.tar import BLOCK, first_member_name, iter_members
from energon_lite.synth.shards import make_caption, make_image


def _real_tar(fmt: int) -> tuple[bytes, list[int]]:
    """A tar of 4 samples (JPEG + caption) with long and non-ASCII names, and its header offsets."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for index in range(4):
            image = io.BytesIO()
            make_image(index, (8, 8)).save(image, format="JPEG")
            folder = "d" * 120 if index % 2 else "é"
            for part, data in (("jpg", image.getvalue()), ("txt", make_caption(index).encode())):
                info = tarfile.TarInfo(f"{folder}/{index:06d}.{part}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    data = buffer.getvalue()
    headers, pos = [], 0
    while pos + BLOCK <= len(data) and data[pos : pos + BLOCK].count(0) != BLOCK:
        headers.append(pos)
        size = int(data[pos + 124 : pos + 136].strip(b" \0") or b"0", 8)
        pos += BLOCK + (size + BLOCK - 1) // BLOCK * BLOCK
    return data, headers


def _fix_checksum(data: bytearray, header: int) -> None:
    block = data[header : header + BLOCK]
    block[148:156] = b" " * 8
    data[header + 148 : header + 156] = f"{sum(block):06o}\0 ".encode()


_SIZES = [b"\xff" * 12, b"\x80" + b"\xff" * 11, b"77777777777\0", b"-0000000001\0", b"9" * 12]
_PAX = [b"-1536", b"99999999999", b"1e3", b"", b"0x10", b"18446744073709551616", b"-0"]


def _mutate(rng: random.Random, data: bytes, headers: list[int]) -> bytes:
    out = bytearray(data)
    header = rng.choice(headers)
    kind = rng.randrange(5)
    if kind == 0:  # random bytes anywhere in a header block
        for _ in range(rng.randint(1, 4)):
            out[header + rng.randrange(BLOCK)] = rng.randrange(256)
    elif kind == 1:  # a hostile size field
        out[header + 124 : header + 136] = rng.choice(_SIZES)
    elif kind == 2:  # a pax record's length or value
        records = out[header + BLOCK : header + 2 * BLOCK]
        if out[header + 156 : header + 157] == b"x" and b" " in records:
            space = records.index(b" ")
            start = header + BLOCK + rng.choice([0, space + 1, rng.randrange(BLOCK)])
            text = rng.choice(
                [b"size=" + rng.choice(_PAX) + b"\n", str(rng.randrange(-9, 999)).encode()]
            )
            out[start : start + len(text)] = text
        else:
            out[header + rng.randrange(BLOCK)] ^= 1 << rng.randrange(8)
    elif kind == 3:  # a name with invalid UTF-8 or a NUL
        out[header + rng.randrange(100)] = rng.choice([0xFF, 0xC3, 0x00])
    else:  # truncate inside the archive
        return bytes(out[: rng.randrange(1, len(out))])
    if rng.random() < 0.8:  # a valid checksum, so the mutation reaches the field checks
        _fix_checksum(out, header)
    return bytes(out)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT])
def test_tar_header_mutations_raise_only_our_errors(fmt: int, tmp_path: Path) -> None:
    data, headers = _real_tar(fmt)
    assert len(list(iter_members(data))) == 8
    outcomes = {"parsed": 0, "refused": 0}
    shard = tmp_path / "fuzz.tar"
    for seed in range(300):
        mutated = _mutate(random.Random(seed), data, headers)
        try:
            members = list(iter_members(mutated, 0, "fuzz.tar"))
        except DatasetFormatError as exc:
            assert "fuzz.tar" in str(exc) and len(str(exc)) < 500, (seed, str(exc))
            outcomes["refused"] += 1
        except Exception as exc:  # pragma: no cover - what this test exists to catch
            raise AssertionError(f"seed {seed}: raw {type(exc).__name__}: {exc}") from exc
        else:
            outcomes["parsed"] += 1
            previous_end = 0
            for member in members:  # a parse is self-consistent: forward, inside the buffer
                assert previous_end <= member.header_offset < member.data_offset, seed
                assert member.data_offset + member.size <= len(mutated), seed
                previous_end = member.end
        shard.write_bytes(mutated)
        with open(shard, "rb") as file, contextlib.suppress(DatasetFormatError):
            first_member_name(file.fileno(), 0, "fuzz.tar")  # the header-only walk
    assert outcomes["parsed"] > 10 and outcomes["refused"] > 100, outcomes
