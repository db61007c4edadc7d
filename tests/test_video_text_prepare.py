"""Preparing an Open-Sora CSV into a memory-mapped index, reopening it, and bad inputs."""

from __future__ import annotations

import logging
import os
import pickle
import re
from pathlib import Path

import numpy as np
import pytest

from energon_lite.cli import main
from energon_lite.errors import DatasetFormatError
from energon_lite.flavors.video_text import VideoTextSource, prepare_video_text
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.synth.video_text import make_media, write_table

HEADER = "path,text,num_frames,height,width\n"


@pytest.fixture(scope="module")
def media_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    folder = tmp_path_factory.mktemp("vt_media")
    return folder, make_media(folder)


def test_prepare_and_reopen(media_dir: tuple[Path, list]) -> None:
    folder, media = media_dir
    csv_path = write_table(folder / "videos.csv", media, 10, extra={"aes": ["4.5", "5"]})
    report = prepare_video_text(csv_path, progress=False)
    assert report.output == folder / "videos.energon"
    assert (report.num_rows, report.splits, report.extra_columns) == (10, {"train": 10}, ["aes"])
    meta = report.output / ".nv-meta"
    assert np.load(meta / "num_frames.npy").tolist() == [m.num_frames for m in media] * 2
    source = VideoTextSource(csv_path, "train")  # the CSV or its folder open the same index
    assert len(source) == len(VideoTextSource(report.output, "train")) == 10
    key, parts = source.read(0, 6)
    assert key == "videos:6"
    assert parts["row"] == {
        "path": str(folder / "media/tall.mkv"),
        "text": "clip 6",
        "num_frames": 40,
        "height": 64,
        "width": 48,
        "fps": 30.0,
        "extra": {"aes": "4.5"},
    }
    assert source.read(0, 4)[1]["row"]["fps"] is None  # the image row's empty fps
    # a worker gets only paths when the source is pickled; arrays reopen lazily
    clone = pickle.loads(pickle.dumps(source))
    assert clone._arrays is None and clone.read(0, 6) == (key, parts)
    # metadatasets open the folder as an ordinary prepared dataset (for subsets)
    assert len(PreparedDataset(report.output, "train")) == 10


def test_absolute_paths_quoted_text_and_split_ratio(
    media_dir: tuple[Path, list], tmp_path: Path
) -> None:
    folder, _ = media_dir
    video = folder / "media/wide.mp4"
    lines = [f'{video},"a, quoted\n""text""",48,48,64\n' for _ in range(20)]
    csv_path = tmp_path / "abs.csv"
    csv_path.write_text(HEADER + "".join(lines))
    out = tmp_path / "elsewhere"
    report = prepare_video_text(
        csv_path, out, split_ratio=[("train", 3), ("val", 1)], progress=False
    )
    assert report.splits == {"train": 15, "val": 5}
    train, val = VideoTextSource(out, "train"), VideoTextSource(out, "val")
    val_shard = int(val.run_shard[0])  # shard ids count every split's pseudo-shard
    rows = [train.row_of(0, i) for i in range(15)] + [val.row_of(val_shard, i) for i in range(5)]
    assert sorted(rows) == list(range(20))  # every row in exactly one split
    assert val.read(val_shard, 0)[1]["row"]["path"] == str(video)
    assert train.read(0, 0)[1]["row"]["text"] == 'a, quoted\n"text"'
    with pytest.raises(DatasetFormatError, match=r"no split 'test'"):
        VideoTextSource(out, "test")


def test_cli_prepare(media_dir: tuple[Path, list], tmp_path: Path, capsys) -> None:
    _, media = media_dir
    csv_path = write_table(tmp_path / "t.csv", media, 4)
    (tmp_path / "media").symlink_to(media_dir[0] / "media")
    assert (
        main(["prepare", str(csv_path), "--output", str(tmp_path / "idx"), "--split-ratio", "0,1"])
        == 0
    )
    assert "Indexed 4 rows" in capsys.readouterr().out
    assert len(VideoTextSource(tmp_path / "idx", "val")) == 4


def _bad(tmp_path: Path, text: str, **kwargs) -> str:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(DatasetFormatError) as info:
        prepare_video_text(path, progress=False, **kwargs)
    return str(info.value)


def test_bad_inputs_name_the_csv_row_and_column(
    media_dir: tuple[Path, list], tmp_path: Path
) -> None:
    video = media_dir[0] / "media/wide.mp4"
    ok = f"{video},t,48,48,64\n"
    message = _bad(tmp_path, "path,text,height\n")
    assert "bad.csv" in message and "missing column(s) ['num_frames', 'width']" in message
    message = _bad(tmp_path, HEADER + ok + f"{video},t,12.5,48,64\n")
    assert re.search(
        r"bad\.csv: line 3 \(row 1\), column 'num_frames': '12\.5' is not an integer", message
    )
    assert "column 'width': 'wide'" in _bad(tmp_path, HEADER + f"{video},t,4,48,wide\n")
    assert "column 'height': '0' is not an integer >= 1" in _bad(
        tmp_path, HEADER + f"{video},t,4,0,8\n"
    )
    assert "column 'fps': 'fast'" in _bad(
        tmp_path, HEADER.strip() + ",fps\n" + f"{video},t,4,4,8,fast\n"
    )
    assert "line 2 (row 0) has 3 fields" in _bad(tmp_path, HEADER + "a.mp4,t,4\n")
    assert "column 'path' is empty" in _bad(tmp_path, HEADER + ",t,4,4,4\n")
    assert "appear twice" in _bad(tmp_path, "path,text,num_frames,height,width,text\n")
    assert "empty CSV" in _bad(tmp_path, "")
    message = _bad(tmp_path, HEADER + ok + "gone.mp4,t,4,4,4\n", missing_media="error")
    assert "line 3 (row 1), column 'path': media file 'gone.mp4' not found" in message


def test_missing_media_is_counted_and_logged(tmp_path: Path, caplog) -> None:
    path = tmp_path / "m.csv"
    path.write_text(HEADER + "gone.mp4,t,4,4,4\n" * 3)
    with caplog.at_level(logging.WARNING, logger="energon_lite"):
        report = prepare_video_text(path, progress=False)
    assert report.num_missing_media == 3 and report.missing_media[0] == (0, "gone.mp4")
    assert "3 row(s) name a media file that does not exist" in caplog.text
    assert prepare_video_text(path, progress=False, missing_media="ignore").num_missing_media == 0


def test_unprepared_or_changed_csv_is_refused(media_dir: tuple[Path, list], tmp_path: Path) -> None:
    from energon_lite import WorkerConfig, get_train_dataset

    csv_path = write_table(tmp_path / "v.csv", media_dir[1], 4)
    kwargs = dict(worker_config=WorkerConfig(0, 1, 0), batch_size=2, shuffle_buffer_size=None,
                  max_samples_per_sequence=None)  # fmt: skip
    with pytest.raises(DatasetFormatError, match=r"not prepared .* run `energon-lite prepare"):
        get_train_dataset(csv_path, **kwargs)
    prepare_video_text(csv_path, progress=False)
    assert len(get_train_dataset(csv_path, **kwargs).pipeline.datasets[0]) == 4
    with open(csv_path, "a") as file:
        file.write("media/wide.mp4,more,48,48,64,24\n")
    os.utime(csv_path)
    with pytest.raises(DatasetFormatError, match=r"changed since it was prepared"):
        get_train_dataset(csv_path, **kwargs)
