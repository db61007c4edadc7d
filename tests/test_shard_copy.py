"""A copied dataset opens; a replaced shard is refused by content, even of the same size
(issue 26 item 6). Copies are made the way users make them: ``cp -r`` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import make_dataset, open_and_read

from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset, prepare_dataset
from energon_lite.errors import DatasetFormatError
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.testing import take

RECORD = ".nv-meta/energon_lite.json"


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


def _cp_r(source: Path, target: Path) -> Path:
    subprocess.run(["cp", "-r", str(source), str(target)], check=True)
    return target


def _same_size_other_shard(root: Path) -> tuple[Path, Path]:
    """Two shards of the same byte size (tar pads to 10 KiB records)."""
    shards = sorted(root.glob("parts/*.tar"))
    by_size: dict[int, list[Path]] = {}
    for shard in shards:
        by_size.setdefault(shard.stat().st_size, []).append(shard)
    pair = next(group for group in by_size.values() if len(group) >= 2)
    return pair[0], pair[1]


def test_a_cp_r_copy_opens_and_restores_a_state(tmp_path: Path) -> None:
    original = make_dataset(tmp_path / "ds", 60, 20)
    copy = _cp_r(original, tmp_path / "copy")
    shard = copy / "parts/data-1.tar"
    assert shard.stat().st_mtime_ns != (original / "parts/data-1.tar").stat().st_mtime_ns
    assert (
        PreparedDataset(copy, "train").fingerprint()
        == PreparedDataset(original, "train").fingerprint()
    )
    loader = _loader(original)
    take(loader, 3)
    state = loader.save_state_rank()
    expected = [tuple(b.__key__) for b in take(loader, 4)]
    moved = _loader(copy)
    moved.restore_state_rank(state)
    assert [tuple(b.__key__) for b in take(moved, 4)] == expected


def test_a_replaced_shard_of_the_same_size_is_refused(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "ds", 60, 20)
    copy = _cp_r(root, tmp_path / "copy")
    a, b = _same_size_other_shard(copy)
    a.write_bytes(b.read_bytes())  # another tar of exactly the same size, under a's name
    with pytest.raises(DatasetFormatError, match=rf"{a.name}: shard replaced since prepare"):
        open_and_read(copy)
    # an in-place rewrite that keeps the size and the mtime is the one thing not probed
    data = (root / "parts" / a.name).read_bytes()
    stat = (root / "parts" / a.name).stat()
    (root / "parts" / a.name).write_bytes(b.read_bytes())
    os.utime(root / "parts" / a.name, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    open_and_read(root)
    (root / "parts" / a.name).write_bytes(data)  # a later mtime: probed, and the same again
    open_and_read(root)


def test_a_dataset_prepared_before_the_probes_still_opens(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "ds", 60, 20)
    record = json.loads((root / RECORD).read_text())
    fingerprint = PreparedDataset(root, "train").fingerprint()
    del record["probes"]  # the record as prepared before this change
    (root / RECORD).write_text(json.dumps(record, indent=1) + "\n")
    assert PreparedDataset(root, "train").fingerprint() == fingerprint
    copy = _cp_r(root, tmp_path / "copy")  # new mtimes: the content digest is recomputed
    assert PreparedDataset(copy, "train").fingerprint() == fingerprint
    replaced = _cp_r(root, tmp_path / "replaced")
    a, b = _same_size_other_shard(replaced)
    a.write_bytes(b.read_bytes())
    with pytest.raises(DatasetFormatError, match=rf"a shard changed since prepare.*{a.name}"):
        open_and_read(replaced, first=a.name)
    prepare_dataset(copy, tar_index_only=True, progress=False)  # adds the probes
    assert "probes" in json.loads((copy / RECORD).read_text())
    assert PreparedDataset(copy, "train").fingerprint() == fingerprint
