"""Scale paths (issue 17): O(runs) epoch lengths, the fast split.yaml reader, parallel prepare."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from energon_lite import prepare_dataset
from energon_lite.errors import DatasetFormatError
from energon_lite.rng import Permutation
from energon_lite.shards.bounded import expand_bounded
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.shards.meta import load_split
from energon_lite.shards.plain_yaml import parse_plain_lists
from energon_lite.stages.reader import Reader


@pytest.mark.parametrize("n", [1, 2, 5, 64, 1000, 4099])
def test_permutation_inverse_undoes_it(n: int) -> None:
    perm = Permutation(n, 3, "slices", 0, 1)
    positions = np.arange(n)
    values = perm.many(positions)
    assert sorted(values.tolist()) == list(range(n))
    assert (perm.inverse_many(values) == positions).all()


@pytest.mark.parametrize("dealing", ["ranges", "slices"])
@pytest.mark.parametrize("multiplier", [None, 1, 2, 3, -1])
def test_samples_per_worker_is_what_each_worker_reads(train_ds: Path, multiplier, dealing) -> None:
    """The count equals the samples each worker really reads, epoch by epoch, for runs with
    tails (20-sample shards, slices of 8 or 7, a subset cutting runs), in both dealings."""
    datasets = [
        PreparedDataset(train_ds, "train"),
        PreparedDataset(train_ds, "train", subset=(13, 97)),
    ]
    for ds in datasets:
        for per_slice, workers in ((8, 3), (7, 4)):
            totals = []
            for epoch in range(6):
                readers = [
                    Reader(
                        ds,
                        leaf_id=0,
                        seed=11,
                        worker_index=g,
                        num_workers=workers,
                        max_samples_per_sequence=per_slice,
                        shuffle=multiplier is not None,
                        repeat=False,
                        shuffle_over_epochs_multiplier=multiplier or 1,
                        start_epoch=epoch,
                        dealing=dealing,
                    )
                    for g in range(workers)
                ]
                read = [sum(1 for _ in reader) for reader in readers]
                expected = readers[0].samples_per_worker(epoch).tolist()
                assert read == expected, (per_slice, workers, epoch)
                totals.append(sum(read))
            if multiplier != -1:  # each slice m times per cycle of m epochs
                m = multiplier or 1
                assert sum(totals[:m]) == m * len(ds) and sum(totals[m : 2 * m]) == m * len(ds)


PLAIN = [  # what prepare (ours, Energon's) writes, and hand-edited variants of that shape
    "split_parts:\n  train:\n  - parts/a.tar\n  - parts/b.tar\n  val: []\n  test:\nexclude: []\n",
    "split_parts:\n  train:\n    - a.tar\n    - b.tar\n  val:\n  - c.tar\nexclude:\n- a.tar/000001\n",
    "exclude:\n  - x.tar\nsplit_parts:\n  t:\n  - y.tar\n",
]
NOT_PLAIN = [  # other YAML: the full parser decides (same result or the same error)
    "split_parts:\n  train:\n  - 2024-01-01\n",  # a date, not a name
    "split_parts:\n  train:\n  - yes\n",  # a boolean
    "split_parts:\n  train:\n  - 'quoted.tar'\n",
    "# a comment\nsplit_parts: {train: [a.tar]}\n",
    "split_parts:\n  train:\n  - a\n   - b\n",  # a continuation line: one scalar 'a - b'
    "split_parts:\n  train:\n- a\n",  # not valid YAML
    "exclude: []\n  train:\n",  # not valid YAML
    "split_parts:\n  train:\n  - a\nsplit_parts:\n",  # a repeated key: YAML keeps the last
]


@pytest.mark.parametrize("text", PLAIN)
def test_plain_split_yaml_reads_as_yaml_does(text: str) -> None:
    assert parse_plain_lists(text) == yaml.safe_load(text)


@pytest.mark.parametrize("text", NOT_PLAIN)
def test_other_yaml_is_left_to_the_yaml_parser(text: str) -> None:
    assert parse_plain_lists(text) is None


def test_split_yaml_edited_by_hand_still_loads(train_ds: Path, tmp_path: Path) -> None:
    """A split.yaml outside the fast shape (comments, quotes, a brace pattern) loads as before;
    plain names are still bounded by the dataset's shard count."""
    meta = train_ds / ".nv-meta"
    fast = load_split(train_ds)
    names = fast.split_parts["train"]
    assert names and all(isinstance(n, str) for n in names)
    edited = tmp_path / "ds"
    (edited / ".nv-meta").mkdir(parents=True)
    for item in meta.iterdir():
        (edited / ".nv-meta" / item.name).write_bytes(item.read_bytes())
    quoted = "\n".join(f"  - '{n}'" for n in names)
    (edited / ".nv-meta/split.yaml").write_text(
        f"# edited\nsplit_parts:\n  train:\n{quoted}\nexclude: []\n"
    )
    assert load_split(edited).split_parts == {"train": names}
    with pytest.raises(DatasetFormatError, match="more than 2 shards"):
        expand_bounded(["a.tar", "b.tar", "c.tar"], 2, "shards", "split.yaml: train")


def _write_text_shards(root: Path, shards: int, per_shard: int) -> None:
    for s in range(shards):
        folder = root / f"part-{s // 100}"
        folder.mkdir(parents=True, exist_ok=True)
        with tarfile.open(folder / f"shard-{s:04d}.tar", "w") as tar:
            for i in range(per_shard):
                for ext, text in (("txt", f"caption {s}/{i}"), ("json", f'{{"id": {i}}}')):
                    info = tarfile.TarInfo(f"{s:04d}_{i:02d}.{ext}")
                    info.size = len(text.encode())
                    tar.addfile(info, io.BytesIO(text.encode()))


def _prepared_files(root: Path) -> dict[str, bytes]:
    files = [*root.rglob("*.tar.idx"), *(root / ".nv-meta").iterdir()]
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in files}


def test_prepare_with_two_workers_writes_the_same_files(tmp_path: Path) -> None:
    """300 small shards prepared with 1 and with 2 worker processes: every ``.tar.idx`` and
    every ``.nv-meta`` file is the same byte for byte (the second folder hard-links the
    first's shards, so sizes and mtimes in the shard record agree too)."""
    one, two = tmp_path / "one", tmp_path / "two"
    _write_text_shards(one, 300, 3)
    for tar in one.rglob("*.tar"):
        (two / tar.relative_to(one)).parent.mkdir(parents=True, exist_ok=True)
        os.link(tar, two / tar.relative_to(one))
    reports = [
        prepare_dataset(
            root,
            split_ratio=[("train", 8), ("val", 1), ("test", 1)],
            sample_type="TextSample",
            field_map={"text": "txt"},
            num_workers=workers,
            progress=False,
        )
        for root, workers in ((one, 1), (two, 2))
    ]
    assert reports[0].shard_counts == reports[1].shard_counts == [3] * 300
    first, second = _prepared_files(one), _prepared_files(two)
    assert len(first) == 300 + 5  # indexes, .info.json, split.yaml, dataset.yaml, record, table
    assert first == second


def test_pin_memory_pins_batches_or_warns_without_an_accelerator(train_ds: Path) -> None:
    """``pin_memory=True``: with an accelerator the batch tensors come out pinned; without
    one (this CPU machine) torch's DataLoader says so once and the batches are the same as
    with ``pin_memory=False``."""
    import torch

    from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset

    def batches(pin: bool) -> list:
        dataset = get_train_dataset(
            train_ds,
            worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
            batch_size=8,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
        )
        loader = get_savable_loader(dataset, pin_memory=pin)
        iterator = iter(loader)
        taken = [next(iterator) for _ in range(2)]
        loader.close()
        return taken

    plain = batches(False)
    assert not plain[0].image.is_pinned()
    if torch.accelerator.is_available():
        pinned = batches(True)
        assert all(batch.image.is_pinned() for batch in pinned)
    else:
        with pytest.warns(UserWarning, match="pin_memory.*no accelerator"):
            pinned = batches(True)
        assert not pinned[0].image.is_pinned()
    for a, b in zip(plain, pinned):
        assert a.__key__ == b.__key__ and torch.equal(a.image, b.image)
