"""Energon's prepare/preview/lint options: the overwrite question on a terminal,
--dataset-yaml-name, --split-parts for preview and lint."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from energon_lite import WorkerConfig, get_loader, get_val_dataset
from energon_lite.cli import main
from energon_lite.synth.shards import write_captioning_shards


def _prepare_args(path: Path, *extra: str) -> list[str]:
    return [
        "prepare", str(path), "--split-ratio", "1,1", "--sample-type", "TextSample",
        "--field-map", '{"text": "txt"}', *extra,
    ]  # fmt: skip


def _on_terminal(args: list[str], answer: bytes) -> tuple[int, str]:
    """Run the CLI with a pseudo-terminal as stdin, typing ``answer``."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "energon_lite.cli", *args],
            stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        os.write(master, answer)
        out, _ = proc.communicate(timeout=120)
    finally:
        os.close(master)
        os.close(slave)
    return proc.returncode, out.decode()


def test_prepare_asks_before_overwriting_on_a_terminal(tmp_path: Path) -> None:
    write_captioning_shards(tmp_path, 40, 10, image_size=(8, 8))
    assert main([*_prepare_args(tmp_path), "--non-interactive"]) == 0
    info = tmp_path / ".nv-meta/.info.json"
    stamp = info.stat().st_mtime_ns
    code, out = _on_terminal(_prepare_args(tmp_path), b"n\n")
    assert code == 0 and "Overwrite it?" in out and "Nothing written" in out
    assert info.stat().st_mtime_ns == stamp
    code, out = _on_terminal(_prepare_args(tmp_path), b"y\n" + b"\n" * 10)
    assert code == 0, out
    assert "Prepared 40 samples" in out and out.rstrip().endswith("Done")
    assert info.stat().st_mtime_ns != stamp
    # scripts: no terminal, no question; the flag is still required
    done = subprocess.run(
        [sys.executable, "-m", "energon_lite.cli", *_prepare_args(tmp_path)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode != 0 and "--force-overwrite" in done.stderr
    assert main([*_prepare_args(tmp_path), "--force-overwrite"]) == 0


def _piped(args: list[str], answers: str) -> subprocess.CompletedProcess[str]:
    """The CLI with ``answers`` on a pipe (no terminal), as Energon's tests feed its prompts."""
    return subprocess.run(
        [sys.executable, "-m", "energon_lite.cli", *args],
        input=answers, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_prepare_takes_energons_answers_on_stdin(tmp_path: Path) -> None:
    """Energon's prepare asks unless --non-interactive, and its tests pipe the answers: the
    overwrite question, the split, 'create a dataset.yaml?', the sample type by Energon's
    number, 'a field_map?', then each field's part."""
    write_captioning_shards(tmp_path, 40, 10, image_size=(8, 8))
    assert main([*_prepare_args(tmp_path), "--non-interactive"]) == 0
    done = _piped(["prepare", str(tmp_path)], "y\n1,0,0\ny\n0\nY\njpg\ntxt\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("Done") and "  0. CaptioningSample" in done.stdout
    config = yaml.safe_load((tmp_path / ".nv-meta/dataset.yaml").read_text())
    assert config["sample_type"]["__class__"] == "CaptioningSample"
    assert config["field_map"] == {"image": "jpg", "caption": "txt"}
    split = yaml.safe_load((tmp_path / ".nv-meta/split.yaml").read_text())["split_parts"]
    assert len(split["train"]) == 4 and not split.get("val")
    # input that ends early: the error names the flags instead
    short = _piped(["prepare", str(tmp_path), "--force-overwrite"], "1,0,0\n")
    assert short.returncode != 0 and "--sample-type" in short.stderr


def test_prepare_without_a_sample_type_keeps_the_dataset_yaml(tmp_path: Path) -> None:
    """As Energon: no --sample-type (or 'n' to 'create a dataset.yaml?') prepares the index
    and the splits only, and a dataset.yaml already there stays."""
    write_captioning_shards(tmp_path, 40, 10, image_size=(8, 8))
    assert main([*_prepare_args(tmp_path), "--non-interactive"]) == 0
    meta = tmp_path / ".nv-meta"
    written = (meta / "dataset.yaml").read_text()
    bare = ["prepare", str(tmp_path), "--non-interactive", "--force-overwrite"]
    assert main([*bare, "--split-ratio", "3,1"]) == 0
    assert (meta / "dataset.yaml").read_text() == written
    split = yaml.safe_load((meta / "split.yaml").read_text())["split_parts"]
    assert [len(split["train"]), len(split["val"])] == [3, 1]
    done = _piped(["prepare", str(tmp_path), "--force-overwrite"], "1,1,0\nn\n")
    assert done.returncode == 0 and "No dataset.yaml written" in done.stdout, done.stderr
    assert (meta / "dataset.yaml").read_text() == written
    fresh = tmp_path / "fresh"
    write_captioning_shards(fresh, 20, 10, image_size=(8, 8))
    assert main(["prepare", str(fresh), "--non-interactive", "--split-ratio", "1"]) == 0
    assert (fresh / ".nv-meta/.info.json").is_file()
    assert not (fresh / ".nv-meta/dataset.yaml").exists()


def test_dataset_yaml_name(tmp_path: Path) -> None:
    write_captioning_shards(tmp_path, 20, 10, image_size=(8, 8))
    assert main([*_prepare_args(tmp_path), "--non-interactive"]) == 0
    assert main([
        *_prepare_args(tmp_path, "--force-overwrite", "--dataset-yaml-name", "captions.yaml"),
        "--sample-type", "CaptioningSample", "--field-map", '{"image": "jpg", "caption": "txt"}',
    ]) == 0  # fmt: skip
    meta = tmp_path / ".nv-meta"
    assert "TextSample" in (meta / "dataset.yaml").read_text()  # kept
    assert "CaptioningSample" in (meta / "captions.yaml").read_text()
    ds = get_val_dataset(
        tmp_path, worker_config=WorkerConfig(0, 1, 0), batch_size=None,
        split_part="train", dataset_config="captions.yaml",
    )  # fmt: skip
    assert {type(s).__name__ for s in get_loader(ds)} == {"CaptioningSample"}
    bad = _prepare_args(tmp_path, "--force-overwrite", "--dataset-yaml-name", "../x.yaml")
    assert main(bad) != 0 and not (tmp_path / "x.yaml").exists()


def test_a_dataset_yaml_may_name_its_split_file(tmp_path: Path) -> None:
    """Energon's dataset.yaml may say ``split_config: split2.yaml`` (its test_exclusion does):
    that file's splits and excludes are read; a name outside .nv-meta is refused."""
    from energon_lite.errors import DatasetFormatError

    write_captioning_shards(tmp_path, 40, 10, image_size=(8, 8), key_format="k{:03d}")
    assert main([*_prepare_args(tmp_path), "--non-interactive"]) == 0
    meta = tmp_path / ".nv-meta"
    split = yaml.safe_load((meta / "split.yaml").read_text())
    first = split["split_parts"]["train"][0]
    split["exclude"] = [first, "parts/data-1.tar/k01{0..4}"]
    (meta / "split2.yaml").write_text(yaml.safe_dump(split))
    config = yaml.safe_load((meta / "dataset.yaml").read_text())
    (meta / "excluding.yaml").write_text(yaml.safe_dump({**config, "split_config": "split2.yaml"}))

    def keys(name: str) -> list[str]:
        ds = get_val_dataset(
            tmp_path, worker_config=WorkerConfig(0, 1, 0), batch_size=None,
            split_part="train", dataset_config=name,
        )  # fmt: skip
        return [s.__key__ for s in get_loader(ds)]

    every = keys("dataset.yaml")
    left = keys("excluding.yaml")
    assert len(left) == len(every) - 15 and not {"k010", "k014"} & set(left)
    (meta / "bad.yaml").write_text(yaml.safe_dump({**config, "split_config": "../split.yaml"}))
    with pytest.raises(DatasetFormatError, match=r"bad.yaml: split_config: '../split.yaml'"):
        keys("bad.yaml")


def test_preview_and_lint_take_split_parts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_captioning_shards(tmp_path, 40, 10, image_size=(8, 8), key_format="k{:03d}")
    assert main([*_prepare_args(tmp_path), "--non-interactive"]) == 0
    capsys.readouterr()
    assert main(["preview", str(tmp_path), "--split-parts", "train,val", "-n", "1"]) == 0
    out = capsys.readouterr().out
    assert "== train" in out and "== val" in out and out.count("    text (<class 'str'>): ") == 2
    assert main(["lint", str(tmp_path), "--quiet", "--split-parts", "val"]) == 0
    assert "0 problem(s)" in capsys.readouterr().out
    assert main(["lint", str(tmp_path), "--quiet", "--split-parts", "val,test"]) == 1
    assert "test: no such split" in capsys.readouterr().out
