"""The line index of JSONL files and meta lists: prepare, open, read, Energon compatibility."""

from __future__ import annotations

import json
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
