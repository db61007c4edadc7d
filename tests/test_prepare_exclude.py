"""`prepare --exclude` and `--split-ratio` refuse mistakes at prepare, not at the first load
(issue 26, items 2 and 3): bad entries name the nearest shards, Energon's regex form works,
the summary counts what is left, an empty tar can be left out, and a ratio that leaves a
split empty is an error naming the fix."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml
from conftest import run_cli

from energon_lite import WorkerConfig, get_train_dataset, prepare_dataset
from energon_lite.errors import ConfigError
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.synth.shards import write_captioning_shards

FIELD_MAP = '{"image": "jpg", "caption": "txt"}'


def _cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args)


def _prepare_cli(root: Path, *extra: str, ratio: str = "1") -> subprocess.CompletedProcess:
    return _cli(
        "prepare", str(root), "--non-interactive", "--force-overwrite", "--split-ratio", ratio,
        "--sample-type", "CaptioningSample", "--field-map", FIELD_MAP, *extra,
    )  # fmt: skip


def _shards(root: Path) -> Path:
    """Three shards of 100 samples, named as the issue's: shard-000.tar ... shard-002.tar."""
    write_captioning_shards(root, 300, 100, image_size=(8, 8), prefix="shard")
    names = sorted(p.name for p in root.glob("*.tar"))
    assert names == ["shard-0.tar", "shard-1.tar", "shard-2.tar"], names
    for i in range(3):
        (root / f"shard-{i}.tar").rename(root / f"shard-00{i}.tar")
    return root


def test_an_entry_that_names_no_shard_is_refused_with_the_nearest_names(tmp_path: Path) -> None:
    root = _shards(tmp_path / "ds")
    done = _prepare_cli(root, "--exclude", "nonexistent.tar")
    assert done.returncode == 1
    assert "--exclude 'nonexistent.tar': names no shard" in done.stderr
    assert "nearest shard names: shard-00" in done.stderr
    assert not (root / ".nv-meta").exists() and not list(root.glob("*.idx"))
    done = _prepare_cli(root, "--exclude", "shard-002.tar/no-such-key")
    assert done.returncode == 1
    assert "shard shard-002.tar has no sample with key(s) ['no-such-key']" in done.stderr
    done = _prepare_cli(root, "--exclude", "shard-00{2..4}.tar")  # a brace pattern too wide
    assert done.returncode == 1 and "'shard-003.tar': names no shard" in done.stderr
    with pytest.raises(ConfigError, match=r"leaves out every one of the 3 shard"):
        prepare_dataset(root, split_ratio=[("train", 1)], sample_type="CaptioningSample",
                        field_map={"image": "jpg", "caption": "txt"}, exclude=["shard"],
                        progress=False)  # fmt: skip


def test_excluded_shards_are_counted_and_the_dataset_opens(tmp_path: Path) -> None:
    root = _shards(tmp_path / "ds")
    # Energon's form: a regex searched in the shard paths ("shard-002" finds shard-002.tar)
    done = _prepare_cli(root, "--exclude", "shard-002")
    assert done.returncode == 0, done.stderr
    assert "Prepared 200 samples in 2 shards" in done.stdout
    assert "--exclude 'shard-002': shard-002.tar" in done.stdout
    assert "split train: 200 samples in 2 shards" in _cli("info", str(root)).stdout
    assert len(PreparedDataset(root, "train")) == 200
    # a shard by name, and samples by key (brace pattern): written to split.yaml, counted
    done = _prepare_cli(
        root, "--exclude", "shard-000.tar", "--exclude", "shard-001.tar/0001{10..14}"
    )
    assert done.returncode == 0, done.stderr
    assert "Prepared 195 samples in 2 shards" in done.stdout
    assert "  train: 195 samples in 2 shards" in done.stdout  # samples per split too
    assert "excluded 5 sample(s) by key" in done.stdout
    split = yaml.safe_load((root / ".nv-meta/split.yaml").read_text())
    assert split == {
        "split_parts": {"train": ["shard-001.tar", "shard-002.tar"]},
        "exclude": ["shard-001.tar/0001{10..14}"],
    }
    assert len(PreparedDataset(root, "train")) == 195
    info = _cli("info", str(root)).stdout
    # prepare's count and info's agree: the samples excluded by key are counted by neither
    assert "total: 195 samples, 2 shards" in info and "split train: 195 samples in 2 shards" in info


def test_an_empty_tar_can_be_excluded(tmp_path: Path) -> None:
    root = _shards(tmp_path / "ds")
    tarfile.open(root / "shard-003.tar", "w").close()  # a tar with no member
    done = _prepare_cli(root)
    assert done.returncode == 1 and "shard-003.tar: shard holds no samples" in done.stderr
    assert "--exclude shard-003.tar" in done.stderr
    done = _prepare_cli(root, "--exclude", "shard-003.tar")
    assert done.returncode == 0, done.stderr
    assert "Prepared 300 samples in 3 shards" in done.stdout
    assert "shard-003.tar" not in (root / ".nv-meta/.info.json").read_text()
    (root / "shard-004.tar").write_bytes(b"")  # not even a tar: left out before any read
    done = _prepare_cli(root, "--exclude", "shard-00[34]")
    assert done.returncode == 0, done.stderr
    dataset = get_train_dataset(root, worker_config=WorkerConfig(0, 1, 0), batch_size=None,
                                shuffle_buffer_size=None, max_samples_per_sequence=None,
                                repeat=False)  # fmt: skip
    assert len(list(dataset)) == 300


def test_a_ratio_that_leaves_a_split_empty_is_an_error_naming_the_fix(tmp_path: Path) -> None:
    root = _shards(tmp_path / "ds")
    done = _prepare_cli(root, ratio="8,1,1")
    assert done.returncode == 1
    assert (
        "--split-ratio 8,1,1 over 3 shard(s) leaves split 'val' empty (splits take whole "
        "shards: train 2, val 0, test 1)" in done.stderr
    )
    assert "more, smaller shards (6 already fill every split" in done.stderr
    assert "another ratio (e.g. 1,1,1)" in done.stderr and "--split-parts" in done.stderr
    assert not (root / ".nv-meta").exists()
    # a zero ratio asks for no data: no error
    done = _prepare_cli(root, ratio="2,0,1")
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load((root / ".nv-meta/split.yaml").read_text())["split_parts"]["val"] == []
