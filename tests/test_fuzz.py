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
from energon_lite.shards.tar import BLOCK, first_member_name, iter_members
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


@pytest.mark.timeout(600)  # a hang guard only (a loaded machine is slow)
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


_VALID = {
    "blend.yaml": (
        "splits:\n  train:\n    blend:\n"
        "      - {weight: 3, path: a, subflavors: &s {src: a}}\n"
        "      - {weight: 1, path: b, subset: {range: [0%, 50%]}, subflavors: *s}\n"
        "      - {weight: 1, path: inner.yaml, shuffle_over_epochs_multiplier: 2}\n"
        "  val:\n    path: a\n"
    ),
    "inner.yaml": "splits:\n  train:\n    blend:\n      - {weight: 1, path: a}\n      - {weight: 2, path: b}\n",
    "epochized.yaml": (
        "splits:\n  train:\n    blend_epochized:\n"
        "      - {repetitions: 2, path: a, split_part: train}\n"
        "      - {repetitions: 0.5, path: b, subset: {range: [0, 10]}}\n"
    ),
}
_HOSTILE = [
    -1, 0, 0.0, 1e9, 1e-9, float("inf"), float("nan"), 10**400, True, None, "", "x" * 5000,
    [], {}, [[[[1]]]], {"range": ["0%", "150%"]}, "a\0b", "../../etc", "end", "50%", 2**63,
]  # fmt: skip
_KEYS = ["path", "weight", "repetitions", "subset", "split_part", "subflavors", "blend",
         "blend_epochized", "splits", "__class__", "shuffle_over_epochs_multiplier"]  # fmt: skip


def _nodes(tree, trail=()):
    """Every (container, key) in a parsed document."""
    items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    for key, value in list(items):
        yield tree, key
        if isinstance(value, (dict, list)):
            yield from _nodes(value, (*trail, key))


def _mutate_yaml(rng: random.Random, text: str) -> str:
    import yaml

    if rng.random() < 0.4:  # text-level: YAML syntax characters and digits in random places
        chars = list(text)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(chars))
            op = rng.randrange(3)
            piece = rng.choice(
                [":", "{", "}", "[", "]", ",", "&x", "*x", "-", "\n", " ", "!", "9", "'", "e"]
            )
            if op == 0:
                chars.insert(at, piece)
            elif op == 1:
                del chars[at]
            else:
                chars[at] = piece
        return "".join(chars)
    tree = yaml.safe_load(text)
    container, key = rng.choice(list(_nodes(tree)))
    op = rng.randrange(4)
    if op == 0:
        container[key] = rng.choice(_HOSTILE)
    elif op == 1 and isinstance(container, dict):  # a typo, or a key from elsewhere
        value = container.pop(key)
        new = (
            rng.choice([key[:-1], key + "s", key[::-1], rng.choice(_KEYS)])
            if isinstance(key, str)
            else key
        )
        container[new] = value
    elif op == 2:
        del container[key]
    else:
        container[key] = rng.choice(_HOSTILE) if rng.random() < 0.5 else [container[key]] * 3
    return yaml.safe_dump(tree)


@pytest.fixture(scope="module")
def two_datasets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from conftest import make_dataset

    root = tmp_path_factory.mktemp("fuzz_mds")
    make_dataset(root / "a", 60, 20, [("train", 2), ("val", 1)])
    make_dataset(root / "b", 40, 20)
    return root


@pytest.mark.timeout(600)  # a hang guard only (a loaded machine is slow)
def test_metadataset_mutations_raise_only_our_errors(two_datasets: Path) -> None:
    import math

    from energon_lite.errors import EnergonLiteError
    from energon_lite.metadataset.parse import MAX_REPETITIONS, load_metadataset

    head = "__module__: megatron.energon\n__class__: MetadatasetV2\n"
    for name, body in _VALID.items():
        (two_datasets / name).write_text(head + body)
    outcomes = {"loaded": 0, "refused": 0}
    target = two_datasets / "fuzzed.yaml"
    for seed in range(300):
        rng = random.Random(seed)
        name = rng.choice(sorted(_VALID))
        target.write_text(head + _mutate_yaml(rng, _VALID[name]).replace(head, ""))
        try:
            leaves, mode = load_metadataset(target, "train")
        except EnergonLiteError as exc:
            assert len(str(exc)) < 1500, (seed, str(exc)[:300])
            outcomes["refused"] += 1
        except Exception as exc:  # pragma: no cover - what this test exists to catch
            raise AssertionError(f"seed {seed}: raw {type(exc).__name__}: {exc}") from exc
        else:  # what loads is sane: finite weights summing to 1, bounded repetitions
            outcomes["loaded"] += 1
            if mode == "weights":
                assert math.isclose(sum(leaf.weight for leaf in leaves), 1.0), seed
            for leaf in leaves:
                assert leaf.repetitions is None or 0 < leaf.repetitions <= MAX_REPETITIONS
    assert outcomes["loaded"] > 20 and outcomes["refused"] > 150, outcomes
