"""`prepare`: the files match FORMATS.md byte for byte; every bad input stops with a clear error."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from energon_lite import prepare_dataset
from energon_lite.errors import ConfigError, DatasetFormatError
from energon_lite.synth.shards import write_captioning_shards

FIELD_MAP = {"image": "jpg", "caption": "txt"}


def _prepare(root: Path, **kwargs) -> object:
    kwargs.setdefault("split_ratio", [("train", 1)])
    kwargs.setdefault("sample_type", "CaptioningSample")
    kwargs.setdefault("field_map", FIELD_MAP)
    return prepare_dataset(root, progress=False, **kwargs)


def _expected_offsets(path: Path) -> list[int]:
    """First header offset of each sample key, then the end of the last member (via tarfile)."""
    offsets, last_key, end = [], None, 0
    with tarfile.open(path) as tar:
        for member in tar:
            key = member.name.split(".", 1)[0]
            if key != last_key:
                offsets.append(member.offset)
                last_key = key
            end = member.offset_data + (member.size + 511) // 512 * 512
    return [*offsets, end]


def test_files_match_the_format(tmp_path: Path) -> None:
    write_captioning_shards(tmp_path, 200, 20, image_size=(16, 16))
    _prepare(tmp_path, split_ratio=[("train", 8), ("val", 1), ("test", 1)])
    meta = tmp_path / ".nv-meta"
    info = json.loads((meta / ".info.json").read_text())
    assert info["shard_counts"] == {f"parts/data-{i}.tar": 20 for i in range(10)}
    assert list(info["shard_counts"]) == sorted(info["shard_counts"], key=lambda s: int(s[11:-4]))
    split = yaml.safe_load((meta / "split.yaml").read_text())
    assert split == {
        "split_parts": {
            "train": [f"parts/data-{i}.tar" for i in (0, 1, 2, 3, 4, 5, 6, 7)],
            "val": ["parts/data-8.tar"],
            "test": ["parts/data-9.tar"],
        },
        "exclude": [],
    }
    # shards sort as strings: data-0, data-1, ... data-9 (10 shards keeps one digit)
    dataset = yaml.safe_load((meta / "dataset.yaml").read_text())
    assert dataset == {
        "sample_type": {"__module__": "megatron.energon", "__class__": "CaptioningSample"},
        "field_map": FIELD_MAP,
    }
    for i in range(10):
        shard = tmp_path / f"parts/data-{i}.tar"
        idx = (tmp_path / f"parts/data-{i}.tar.idx").read_bytes()
        assert len(idx) == 21 * 8
        assert np.frombuffer(idx, "<u8").tolist() == _expected_offsets(shard)
    assert not list(tmp_path.glob(".nv-meta.*"))


def test_parallel_indexing_is_identical(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        write_captioning_shards(root, 90, 15, image_size=(16, 16))
    ratio = [("train", 4), ("val", 1), ("test", 1)]
    _prepare(a, num_workers=1, split_ratio=ratio)
    _prepare(b, num_workers=2, split_ratio=ratio)
    for i in range(6):
        assert (a / f"parts/data-{i}.tar.idx").read_bytes() == (
            b / f"parts/data-{i}.tar.idx"
        ).read_bytes()
    assert (a / ".nv-meta/split.yaml").read_text() == (b / ".nv-meta/split.yaml").read_text()


def test_split_parts_regex_exclude_and_shuffle(tmp_path: Path) -> None:
    write_captioning_shards(tmp_path, 100, 10, image_size=(8, 8))
    report = _prepare(
        tmp_path,
        split_ratio=None,
        split_parts=[("train", r"parts/data-[0-6]\.tar"), ("val", r"parts/data-{7..9}\.tar")],
        exclude=["parts/data-0.tar", "parts/data-1.tar/00001{0..2}"],
    )
    # an excluded shard is left out of the dataset (as Energon's --exclude does); excluded
    # samples are listed in split.yaml
    assert report.split_parts["train"] == [f"parts/data-{i}.tar" for i in range(1, 7)]
    assert report.split_parts["val"] == ["parts/data-7.tar", "parts/data-8.tar", "parts/data-9.tar"]
    assert report.num_samples == 90 - 3
    split = yaml.safe_load((tmp_path / ".nv-meta/split.yaml").read_text())
    assert split["exclude"] == ["parts/data-1.tar/00001{0..2}"]
    shuffled = prepare_dataset(
        tmp_path,
        split_ratio=[("train", 1), ("val", 1)],
        sample_type="TextSample",
        field_map={"text": "txt"},
        shuffle_tars=True,
        force_overwrite=True,
        progress=False,
    )
    assert sorted(shuffled.split_parts["train"] + shuffled.split_parts["val"]) == sorted(
        shuffled.shard_names
    )
    assert (
        shuffled.split_parts["train"] != sorted(shuffled.split_parts["train"])
        or shuffled.split_parts["val"] != shuffled.shard_names[5:]
    )


def _write_tar(path: Path, members: list[tuple[str, bytes]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_duplicate_key_names_file_and_key(tmp_path: Path) -> None:
    _write_tar(tmp_path / "a.tar", [("s1.jpg", b"1"), ("s2.jpg", b"2"), ("s1.txt", b"t")])
    with pytest.raises(DatasetFormatError, match=r"a\.tar: duplicate sample key 's1'"):
        _prepare(tmp_path)
    assert not (tmp_path / ".nv-meta").exists()
    assert not (tmp_path / "a.tar.idx").exists()
    _write_tar(tmp_path / "a.tar", [("s1.jpg", b"1"), ("s1.jpg", b"2")])
    with pytest.raises(
        DatasetFormatError, match=r"a\.tar: duplicate sample key 's1': part 'jpg' appears twice"
    ):
        _prepare(tmp_path)


def test_truncated_not_a_tar_and_empty(tmp_path: Path) -> None:
    good = tmp_path / "good"
    write_captioning_shards(good, 40, 20, image_size=(8, 8))
    shard = good / "parts/data-1.tar"
    shard.write_bytes(shard.read_bytes()[:3000])
    with pytest.raises(DatasetFormatError, match=r"data-1\.tar: truncated tar"):
        _prepare(good)
    assert not (good / ".nv-meta").exists() and not list(good.rglob("*.idx"))
    shard.write_bytes(b"this is not a tar file" * 100)
    with pytest.raises(DatasetFormatError, match=r"data-1\.tar: invalid tar header at byte 0"):
        _prepare(good)
    shard.write_bytes(b"")
    with pytest.raises(DatasetFormatError, match=r"data-1\.tar: empty file, not a tar archive"):
        _prepare(good)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DatasetFormatError, match=r"empty: no \.tar shards found"):
        _prepare(empty)


def test_field_map_part_missing_and_overwrite(tmp_path: Path) -> None:
    write_captioning_shards(tmp_path, 20, 10, image_size=(8, 8))
    with pytest.raises(
        DatasetFormatError,
        match=r"field_map\['caption'\] = 'json\[caption\]' names part 'json', which no sample has; parts seen: \['jpg', 'txt'\]",
    ):
        _prepare(tmp_path, field_map={"image": "jpg", "caption": "json[caption]"})
    assert not (tmp_path / ".nv-meta").exists()
    with pytest.raises(ConfigError, match="not fields of CaptioningSample"):
        _prepare(tmp_path, field_map={"picture": "jpg"})
    _prepare(tmp_path)
    with pytest.raises(ConfigError, match="--force-overwrite"):
        _prepare(tmp_path)
    (tmp_path / ".nv-meta/index.uuid").write_text("kept")
    _prepare(tmp_path, force_overwrite=True, split_ratio=[("train", 1)])
    assert (tmp_path / ".nv-meta/index.uuid").read_text() == "kept"
    assert (
        "val" not in yaml.safe_load((tmp_path / ".nv-meta/split.yaml").read_text())["split_parts"]
    )


def test_tar_index_only_rewrites_indexes(tmp_path: Path) -> None:
    write_captioning_shards(tmp_path, 20, 10, image_size=(8, 8))
    prepare_dataset(tmp_path, tar_index_only=True, progress=False)
    assert (tmp_path / "parts/data-0.tar.idx").stat().st_size == 11 * 8
    assert not (tmp_path / ".nv-meta").exists()


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "energon_lite.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_prepare_and_info(tmp_path: Path) -> None:
    write_captioning_shards(tmp_path, 60, 20, image_size=(8, 8), with_json=True)
    done = _cli(
        "prepare",
        "--non-interactive",
        "--split-ratio",
        "1,1,1",
        "--sample-type",
        "CaptioningSample",
        "--field-map",
        '{"image": "jpg", "caption": "json[caption]"}',
        "--num-workers",
        "2",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    assert "Prepared 60 samples in 3 shards; parts: jpg, json, txt" in done.stdout
    assert "indexing shards" in done.stderr  # the progress bar
    info = _cli("info", str(tmp_path))
    assert "split train: 20 samples in 1 shard\n" in info.stdout
    assert "field map: image <- jpg, caption <- json[caption]" in info.stdout
    again = _cli(
        "prepare",
        "--non-interactive",
        "--split-ratio",
        "1",
        "--sample-type",
        "TextSample",
        "--field-map",
        '{"text": "txt"}',
        str(tmp_path),
    )
    assert again.returncode == 1 and "pass --force-overwrite" in again.stderr


def test_cli_interactive_on_a_terminal(tmp_path: Path) -> None:
    """Without --non-interactive on a real pseudo-terminal, prepare asks its questions."""
    import os
    import pty

    write_captioning_shards(tmp_path, 40, 20, image_size=(8, 8))
    main_fd, child_fd = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "energon_lite.cli", "prepare", str(tmp_path)],
        stdin=child_fd,
        stdout=child_fd,
        stderr=child_fd,
    )
    os.close(child_fd)
    answers = iter(["1,1", "y", "CaptioningSample", "y", "jpg", "txt"])
    output = b""
    while proc.poll() is None or output.endswith(b": "):
        try:
            chunk = os.read(main_fd, 4096)
        except OSError:
            break
        output += chunk
        if output.rstrip().endswith(b":"):
            os.write(main_fd, (next(answers, "") + "\n").encode())
    proc.wait(timeout=60)
    os.close(main_fd)
    text = output.decode(errors="replace")
    assert "Split ratio train,val,test" in text and "Part for field 'image'" in text
    assert proc.returncode == 0, text
    config = yaml.safe_load((tmp_path / ".nv-meta/dataset.yaml").read_text())
    assert config["field_map"] == {"image": "jpg", "caption": "txt"}


def test_a_split_pattern_that_matches_nothing_warns_and_loading_names_it(
    tmp_path: Path, caplog
) -> None:
    from energon_lite import WorkerConfig, get_val_dataset

    write_captioning_shards(tmp_path, 30, 10, image_size=(8, 8))
    with pytest.raises(ConfigError, match=r"--split-ratio 8,1,1 over 3 shard\(s\) leaves split"):
        _prepare(tmp_path, split_ratio=[("train", 8), ("val", 1), ("test", 1)])  # over 3 shards
    with caplog.at_level("WARNING", logger="energon_lite"):
        report = _prepare(
            tmp_path, split_ratio=None, split_parts=[("train", ".*"), ("val", "nothing")]
        )
    assert report.split_parts["val"] == [] and len(report.warnings) == 1
    assert "split 'val' gets no shard: 3 shard(s)" in caplog.text and "--split-parts" in caplog.text
    with pytest.raises(ConfigError, match=r"the split is empty \(0 samples\): split 'val' of "):
        get_val_dataset(tmp_path, worker_config=WorkerConfig(0, 1, 0), batch_size=2)


def test_a_shard_listed_twice_in_a_split_is_refused(tmp_path: Path) -> None:
    from energon_lite.cli.info import lint
    from energon_lite.shards.dataset import PreparedDataset

    write_captioning_shards(tmp_path, 40, 10, image_size=(8, 8))
    _prepare(tmp_path, split_ratio=[("train", 3), ("val", 1)])
    (tmp_path / ".nv-meta/split.yaml").write_text(
        "split_parts:\n  train: [parts/data-0.tar, 'parts/data-{0..2}.tar']\n"
        "  val: [parts/data-2.tar, parts/data-3.tar]\n"
    )
    with pytest.raises(
        DatasetFormatError, match=r"split 'train' lists \['parts/data-0\.tar'\] more"
    ):
        PreparedDataset(tmp_path, "train")
    problems = lint(tmp_path, progress=False)
    assert any(
        "shard parts/data-0.tar" not in p and "lists ['parts/data-0.tar']" in p for p in problems
    )
    assert any(
        "shard parts/data-2.tar is in split 'train' and in split 'val'" in p for p in problems
    )


def test_field_map_is_checked_against_the_type_and_a_real_sample(tmp_path: Path) -> None:
    write_captioning_shards(tmp_path, 20, 10, image_size=(8, 8), with_json=True)
    with pytest.raises(ConfigError, match=r"leaves \['caption'\] of CaptioningSample unmapped"):
        _prepare(tmp_path, field_map={"image": "jpg"})
    with pytest.raises(
        DatasetFormatError,
        match=r"sample '000000': field_map value 'json\[captoin\]': the part has no key 'captoin'; "
        r"its keys: \['caption', 'index', 'tags'\]",
    ):
        _prepare(tmp_path, field_map={"image": "jpg", "caption": "json[captoin]"})
    with pytest.raises(DatasetFormatError, match=r"the part\[tags\] is a list of 2 items; '5'"):
        _prepare(tmp_path, field_map={"image": "jpg", "caption": "json[tags][5]"})
    with pytest.raises(
        DatasetFormatError, match=r"'txt\[0\]' indexes part 'txt', which is not JSON"
    ):
        _prepare(tmp_path, field_map={"image": "jpg", "caption": "txt[0]"})
    assert not (tmp_path / ".nv-meta").exists() and not list(tmp_path.rglob("*.idx"))


def test_optional_fields_are_carried_from_a_json_part(tmp_path: Path) -> None:
    from energon_lite import WorkerConfig, get_loader, get_train_dataset

    write_captioning_shards(tmp_path, 20, 10, image_size=(8, 8), with_json=True)
    _prepare(
        tmp_path,
        split_ratio=[("train", 1)],
        sample_type="ImageClassificationSample",
        field_map={"image": "jpg", "label": "json[index]", "label_name": "json[caption]"},
    )
    dataset = get_train_dataset(tmp_path, worker_config=WorkerConfig(0, 1, 0), batch_size=None,
                                shuffle_buffer_size=None, max_samples_per_sequence=None,
                                repeat=False)  # fmt: skip
    samples = list(get_loader(dataset))
    assert sorted(s.label for s in samples) == list(range(20))
    assert all(s.label_name.startswith(f"sample {s.label}:") for s in samples)
