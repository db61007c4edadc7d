"""A dataset is known by its content: a state of one dataset is refused by a look-alike, and a
shard changed or deleted after prepare is refused by name (issue 15)."""

from __future__ import annotations

import os
import shutil
import tarfile
from pathlib import Path

import pytest
from conftest import make_dataset, open_and_read

from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset, prepare_dataset
from energon_lite.errors import DatasetFormatError, StateError
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.testing import take


def _make(root: Path, quality: int) -> Path:
    return make_dataset(root, 60, 20, with_json=False, quality=quality)


def _loader(root: Path):
    return get_savable_loader(
        get_train_dataset(
            root,
            worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
            batch_size=4,
            shuffle_buffer_size=8,
            max_samples_per_sequence=5,
        )
    )


def test_same_names_and_counts_other_content_is_another_dataset(tmp_path: Path) -> None:
    a, b = _make(tmp_path / "a/ds", 90), _make(tmp_path / "b/ds", 40)  # same folder name
    ds_a, ds_b = PreparedDataset(a, "train"), PreparedDataset(b, "train")
    assert ds_a.shard_names == ds_b.shard_names and len(ds_a) == len(ds_b) == 60
    assert ds_a.fingerprint() != ds_b.fingerprint()
    loader = _loader(a)
    take(loader, 3)
    state = loader.save_state_rank()
    with pytest.raises(StateError, match=r"another loader configuration: datasets: "):
        _loader(b).restore_state_rank(state)
    # a byte-identical copy (times kept) is the same dataset: the state restores there
    copy = tmp_path / "c/ds"
    shutil.copytree(a, copy, copy_function=shutil.copy2)
    assert PreparedDataset(copy, "train").fingerprint() == ds_a.fingerprint()
    _loader(copy).restore_state_rank(state)
    # datasets prepared without our record (as Energon prepares them) differ as well
    for root in (a, b):
        (root / ".nv-meta/energon_lite.json").unlink()
    assert PreparedDataset(a, "train").fingerprint() != PreparedDataset(b, "train").fingerprint()


def _replace_caption(shard: Path, key: str) -> None:
    """Rewrite one caption in place with different bytes of the same length."""
    with tarfile.open(shard) as tar:
        member = tar.getmember(f"{key}.txt")
    data = bytearray(shard.read_bytes())
    start = member.offset_data
    data[start : start + member.size] = b"X" * member.size
    shard.write_bytes(bytes(data))


def test_changed_shard_is_refused_at_its_first_read(tmp_path: Path) -> None:
    root = _make(tmp_path / "ds", 90)
    shard = root / "parts/data-1.tar"
    os.utime(shard, ns=(0, shard.stat().st_mtime_ns - 5 * 10**9))  # touched, same content
    open_and_read(root)  # probed: the same bytes (a copy looks like this too)
    with open(shard, "ab") as file:
        file.write(b"\0" * 512)
    with pytest.raises(DatasetFormatError, match=r"data-1\.tar: shard changed since prepare"):
        open_and_read(root)
    prepare_dataset(
        root,
        split_ratio=[("train", 1)],
        sample_type="CaptioningSample",
        field_map={"image": "jpg", "caption": "txt"},
        force_overwrite=True,
        progress=False,
    )
    size = shard.stat().st_size
    _replace_caption(shard, "000020")  # same size, new content (its first sample), written later
    os.utime(shard, ns=(0, shard.stat().st_mtime_ns + 2 * 10**9))
    assert shard.stat().st_size == size
    with pytest.raises(DatasetFormatError, match=r"data-1\.tar: shard replaced.*re-run prepare"):
        open_and_read(root)
    prepare_dataset(root, tar_index_only=True, progress=False)  # re-index, keep the splits
    ds = PreparedDataset(root, "train")
    assert ds.read(*ds.locate(20))[1]["txt"] == b"X" * len(ds.read(*ds.locate(20))[1]["txt"])
    _replace_caption(shard, "000026")
    os.utime(shard, ns=(0, shard.stat().st_mtime_ns + 2 * 10**9))
    (root / ".nv-meta/energon_lite.json").unlink()  # Energon-prepared: no record, no check
    assert len(PreparedDataset(root, "train")) == 60


def test_deleted_or_dangling_shard_is_named(tmp_path: Path) -> None:
    root = _make(tmp_path / "ds", 90)
    (root / "parts/data-2.tar").unlink()
    with pytest.raises(DatasetFormatError, match=r"data-2\.tar: shard is missing"):
        open_and_read(root)
    (root / "parts/data-2.tar").symlink_to(root / "parts/nowhere.tar")  # dangling link
    with pytest.raises(DatasetFormatError, match=r"data-2\.tar: shard is missing"):
        open_and_read(root)
    (root / ".nv-meta/energon_lite.json").unlink()  # without a record: at the first read
    ds = PreparedDataset(root, "train")
    with pytest.raises(DatasetFormatError, match=r"data-2\.tar: shard is missing"):
        ds.read(2, 0)
