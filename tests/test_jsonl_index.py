"""The line index of JSONL files and meta lists: prepare, open, read, Energon compatibility."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from energon_lite.cli.main import main as cli
from energon_lite.errors import DatasetFormatError
from energon_lite.flavors.jsonl import JsonlSource, index, prepare_lines
from energon_lite.synth.lines import write_caption_jsonl


def _lines(tmp_path: Path, text: str, name: str = "d.jsonl") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1}\n{"a": 2}\n{"a": 3}\n',
        '\n\n{"a": 1}\n\n{"a": 2}\n   \n{"a": 3}\n\n',  # blank lines: no samples
        '{"a": 1}\r\n{"a": 2}\r\n{"a": 3}',  # CRLF, no final newline
    ],
)
def test_index_matches_energon_byte_for_byte(tmp_path: Path, text: str) -> None:
    from megatron.energon.flavors import CrudeJsonlDatasetFactory as EnergonJsonl

    ours = _lines(tmp_path, text, "ours.jsonl")
    theirs = _lines(tmp_path, text, "theirs.jsonl")
    assert prepare_lines(ours, progress=False).count == 3
    assert EnergonJsonl.prepare_dataset(theirs) == 3
    assert (tmp_path / "ours.jsonl.idx").read_bytes() == (
        tmp_path / "theirs.jsonl.idx"
    ).read_bytes()
    source = JsonlSource(ours)
    values = [json.loads(parts["json"]) for _, parts in source.read_range(0, 0, 3)]
    assert values == [{"a": 1}, {"a": 2}, {"a": 3}]


def test_every_line_round_trips_across_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index, "_BLOCK", 100)  # many blocks, lines cut at block edges
    path = write_caption_jsonl(tmp_path / "c.jsonl", 257)
    assert prepare_lines(path, progress=False).count == 257
    source = JsonlSource(path)
    assert len(source) == 257
    expected = [json.loads(line) for line in path.read_text().splitlines()]
    got = [json.loads(p["json"]) for _, p in source.read_range(0, 0, 257)]
    assert got == expected
    assert source.read(0, 200) == ("200", {"json": (json.dumps(expected[200]) + "\n").encode()})


def test_energon_prepared_file_reads_the_same(tmp_path: Path) -> None:
    from megatron.energon.flavors import CrudeJsonlDatasetFactory as EnergonJsonl

    path = write_caption_jsonl(tmp_path / "e.jsonl", 40)
    EnergonJsonl.prepare_dataset(path)  # no .idx.json: read as plain JSONL
    source = JsonlSource(path)
    assert len(source) == 40 and source.format == "jsonl"
    assert json.loads(source.read(0, 39)[1]["json"])["idx"] == 39


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ('{"a": 1}\n{"a": 2}\n\n{"a": 3,}\n', 4, "malformed JSON"),
        ('{"a": 1}\n[1, 2]\n', 2, "not a JSON object"),
        ('{"a": 1}\n{"a": 1}{"b": 2}\n', 2, "malformed JSON"),
        ('{"a": 1}\n{"a": "x\n', 2, "not a JSON object"),
    ],
)
def test_prepare_names_the_malformed_line(
    tmp_path: Path, text: str, line: int, problem: str
) -> None:
    path = _lines(tmp_path, text)
    with pytest.raises(DatasetFormatError, match=rf"d.jsonl:{line}: line {line}: {problem}"):
        prepare_lines(path, progress=False)
    assert not (tmp_path / "d.jsonl.idx").exists()  # nothing half-written


def test_prepare_names_a_line_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "u.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2}\n{"a": "\xff"}\n')
    with pytest.raises(DatasetFormatError, match=r"u.jsonl:3: line 3: malformed JSON"):
        prepare_lines(path, progress=False)


def test_cli_prepare_jsonl_and_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write_caption_jsonl(tmp_path / "g.jsonl", 10)
    assert cli(["prepare", str(good)]) == 0
    out = capsys.readouterr().out
    assert "Found 10 samples" in out and "Done" in out
    bad = _lines(tmp_path, '{"a": 1}\n{oops}\n', "b.jsonl")
    assert cli(["prepare", str(bad)]) == 1  # cli/errors.py: every error exits with 1
    assert "b.jsonl:2: line 2: malformed JSON" in capsys.readouterr().err


def test_meta_list_with_media_root(tmp_path: Path) -> None:
    media = tmp_path / "media"
    media.mkdir()
    path = _lines(tmp_path, "img/a b.jpg 3\nimg/c.jpg cat\n\nimg/d.jpg\n", "meta.txt")
    assert cli(["prepare", str(path), "--media-root", str(media)]) == 0
    source = JsonlSource(path)
    assert source.format == "text" and source.media_root == media.resolve()
    assert [p for _, p in source.read_range(0, 0, 3)] == [
        {"path": "img/a b.jpg", "label": 3},
        {"path": "img/c.jpg", "label": "cat"},
        {"path": "img/d.jpg", "label": None},
    ]
    moved = tmp_path / "moved"
    moved.mkdir()
    for name in ("meta.txt", "meta.txt.idx", "meta.txt.idx.json"):
        shutil.move(tmp_path / name, moved / name)
    shutil.move(media, moved / "media")
    assert JsonlSource(moved / "meta.txt").media_root == (moved / "media").resolve()


def test_open_checks_the_index_and_cuts_runs(tmp_path: Path) -> None:
    path = write_caption_jsonl(tmp_path / "r.jsonl", 1000)
    with pytest.raises(DatasetFormatError, match="run `energon-lite prepare"):
        JsonlSource(path)
    prepare_lines(path, progress=False)
    source = JsonlSource(path, subset=(100, 900))
    assert len(source) == 800
    assert (
        source.num_runs > 1 and int(source.run_start[0]) == 100 and int(source.run_end[-1]) == 900
    )
    assert np.all(source.run_shard == 0)
    with open(path, "a") as file:
        file.write('{"idx": 1000}\n')
    with pytest.raises(DatasetFormatError, match="the file changed"):
        JsonlSource(path)


def test_text_list_round_trips_every_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from energon_lite.flavors.jsonl import parse_text_line
    from energon_lite.sources.base import Source

    monkeypatch.setattr(index, "_BLOCK", 64)
    lines = [f"dir {i % 3}/img_{i:05d}.jpg {i % 7}" for i in range(300)]
    path = _lines(tmp_path, "\n".join(lines) + "\n", "meta.lst")
    assert prepare_lines(path, progress=False).count == 300
    source = JsonlSource(path)
    assert isinstance(source, Source)
    got = [parts for _, parts in source.read_range(0, 0, 300)]
    assert got == [parse_text_line(line.encode()) for line in lines]
    assert got[5] == {"path": "dir 2/img_00005.jpg", "label": 5}


def _swap_lines(path: Path, pairs: range) -> None:
    """Swap lines ``i`` and ``i + 1`` (of different lengths) for each ``i`` in ``pairs``: the
    size stays, every line is still valid JSON, but the lines' byte boundaries move."""
    lines = path.read_bytes().split(b"\n")
    before = path.stat().st_size
    swapped = 0
    for i in pairs:
        if len(lines[i]) != len(lines[i + 1]):
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
            swapped += 1
    assert swapped
    path.write_bytes(b"\n".join(lines))
    assert path.stat().st_size == before


def test_an_edit_of_the_same_size_is_refused_at_open(tmp_path: Path) -> None:
    path = write_caption_jsonl(tmp_path / "s.jsonl", 40)
    prepare_lines(path, progress=False)
    recorded = json.loads((tmp_path / "s.jsonl.idx.json").read_text())["sampled_blake2b"]
    assert recorded and len(JsonlSource(path)) == 40
    _swap_lines(path, range(20, 22))
    with pytest.raises(DatasetFormatError) as info:
        JsonlSource(path)
    assert f"{path}: content changed since it was prepared" in str(info.value)
    assert f"re-run `energon-lite prepare {path}`" in str(info.value)
    prepare_lines(path, progress=False)  # the fix the message names
    assert len(JsonlSource(path)) == 40


def test_an_edit_between_the_sampled_windows_is_caught_when_read(tmp_path: Path) -> None:
    path = write_caption_jsonl(tmp_path / "big.jsonl", 12_000)  # well over 256 KiB
    prepare_lines(path, progress=False)
    source = JsonlSource(path)
    size = path.stat().st_size
    assert size > 64 * 4096
    step = (size - 4096) / 63  # the windows the open check hashes
    covered = [(round(i * step), round(i * step) + 4096) for i in range(64)]
    offsets = source.offsets(0, source.count).tolist()
    line = next(
        i
        for i in range(source.count - 1)
        if not any(a < offsets[i + 2] and offsets[i] < b for a, b in covered)
    )
    assert source.read_range(0, 0, 10)[0][0] == "0"  # reading before the edit: fine
    stat = path.stat()
    _swap_lines(path, range(line, line + 1))
    # the windows do not see it; the open does, by the new mtime and the whole-content hash
    with pytest.raises(DatasetFormatError, match=r"content changed .* new modification time"):
        JsonlSource(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the edit hides its mtime ...
    source_after = JsonlSource(path)  # ... so an open trusts the file without a read ...
    for opened in (source, source_after):  # ... and the read sees it, mid-run or reopened
        with pytest.raises(DatasetFormatError, match=rf"{path}: the line of sample {line}"):
            opened.read_range(0, max(0, line - 3), line + 3)


def test_a_same_size_edit_inside_a_line_is_refused_at_open_and_by_lint(tmp_path: Path) -> None:
    """An edit that keeps the size and every line boundary, between the sampled windows, was
    served; now the new mtime makes the open hash the whole file. With the mtime put back
    (``touch -r``) the open trusts it, and ``lint`` (which hashes the whole file) names it."""
    from energon_lite.cli.info import lint

    path = write_caption_jsonl(tmp_path / "big.jsonl", 12_000)
    prepare_lines(path, progress=False)
    assert lint(path, progress=False) == []
    stat, data = path.stat(), bytearray(path.read_bytes())
    middle = data.index(b"caption", len(data) // 2 + 1234)  # inside a JSON string
    data[middle : middle + 7] = b"CAPTION"
    path.write_bytes(bytes(data))
    with pytest.raises(DatasetFormatError, match=rf"{path}: content changed since it was prep"):
        JsonlSource(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert len(JsonlSource(path)) == 12_000  # the remaining limit, docs/safety.md
    (problem,) = lint(path, progress=False)
    assert f"{path}: content changed since it was prepared (its whole-content hash" in problem


def test_an_index_written_without_a_digest_still_opens(tmp_path: Path) -> None:
    path = write_caption_jsonl(tmp_path / "old.jsonl", 30)
    prepare_lines(path, progress=False)
    side = tmp_path / "old.jsonl.idx.json"
    data = json.loads(side.read_text())
    del data["sampled_blake2b"]  # as written before the digest existed
    side.write_text(json.dumps(data))
    assert len(JsonlSource(path)) == 30


def test_a_100000_digit_integer_names_the_file_and_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "big_int.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n{"n": ' + "7" * 100_000 + "}\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "energon_lite.cli", "prepare", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert f"{path}:3: line 3: unreadable JSON value" in done.stderr, done.stderr[-500:]
    assert "unexpected" not in done.stderr and "report it" not in done.stderr
