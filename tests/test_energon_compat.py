"""Compatibility with Megatron-Energon 7.x in both directions (needs the `bench` extra)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch
from conftest import oracle

from energon_lite import WorkerConfig, get_loader, get_train_dataset, prepare_dataset
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.synth.shards import write_captioning_shards

energon = oracle()


def _shards(root: Path) -> None:
    write_captioning_shards(root, 90, 30, image_size=(16, 16), with_json=True, key_format="s{:06d}")


def test_energon_prepared_dataset_reads_here(tmp_path: Path) -> None:
    _shards(tmp_path)
    done = subprocess.run(  # Energon's own CLI, as its users run it
        [sys.executable, "-m", "megatron.energon.cli.main", "prepare", "--non-interactive",
         "--split-ratio", "2,1,0", "--sample-type", "CaptioningSample",
         "--field-map", '{"image": "jpg", "caption": "json[caption]"}', str(tmp_path)],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / ".nv-meta/index.sqlite").exists()  # really Energon's output
    ds = PreparedDataset(tmp_path, "train")
    assert len(ds) == 60
    for position in range(len(ds)):
        shard_id, index = ds.locate(position)
        key, parts = ds.read(shard_id, index)
        with tarfile.open(tmp_path / ds.shard_names[shard_id]) as tar:
            assert parts["jpg"] == tar.extractfile(f"{key}.jpg").read()
            assert parts["json"] == tar.extractfile(f"{key}.json").read()
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    loaded = get_train_dataset(
        tmp_path,
        worker_config=wc,
        batch_size=10,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        repeat=False,
    )
    samples = [(k, c) for b in get_loader(loaded) for k, c in zip(b.__key__, b.caption)]
    assert sorted(k for k, _ in samples) == [f"s{i:06d}" for i in range(60)]
    assert all(caption.startswith(f"sample {int(key[1:])}:") for key, caption in samples)


@pytest.mark.usefixtures("collector_spared")  # Energon collects garbage
def test_our_dataset_loads_in_energon_with_the_same_samples(tmp_path: Path) -> None:
    _shards(tmp_path)
    prepare_dataset(
        tmp_path,
        split_ratio=[("train", 1)],
        sample_type="CaptioningSample",
        field_map={"image": "jpg", "caption": "txt"},
        progress=False,
    )
    assert (
        tmp_path / ".nv-meta/energon_lite.json"
    ).is_file()  # our shard record: Energon ignores it
    wc = energon.WorkerConfig(rank=0, world_size=1, num_workers=0)
    theirs_ds = energon.get_train_dataset(
        tmp_path,
        worker_config=wc,
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        repeat=False,
    )
    theirs = {s.__key__: s for s in energon.get_loader(theirs_ds)}
    ours_ds = get_train_dataset(
        tmp_path,
        worker_config=WorkerConfig(0, 1, 0),
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        repeat=False,
    )
    ours = {s.__key__: s for s in get_loader(ours_ds)}
    assert set(ours) == set(theirs) and len(ours) == 90
    for key in ("s000000", "s000045", "s000089"):
        assert ours[key].caption == theirs[key].caption
        assert torch.equal(ours[key].image, theirs[key].image)
