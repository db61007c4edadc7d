"""Scale paths (issue 17): O(runs) epoch lengths, the fast split.yaml reader, parallel prepare."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from energon_lite.errors import DatasetFormatError
from energon_lite.index.bounded import expand_bounded
from energon_lite.index.dataset import PreparedDataset
from energon_lite.index.meta import load_split
from energon_lite.index.plain_yaml import parse_plain_lists
from energon_lite.reader import Reader
from energon_lite.rng import Permutation


@pytest.mark.parametrize("n", [1, 2, 5, 64, 1000, 4099])
def test_permutation_inverse_undoes_it(n: int) -> None:
    perm = Permutation(n, 3, "slices", 0, 1)
    positions = np.arange(n)
    values = perm.many(positions)
    assert sorted(values.tolist()) == list(range(n))
    assert (perm.inverse_many(values) == positions).all()


@pytest.mark.parametrize("multiplier", [None, 1, 2, 3, -1])
def test_samples_per_worker_is_what_each_worker_reads(train_ds: Path, multiplier) -> None:
    """The O(runs) count equals the samples each worker really reads, epoch by epoch, for
    runs with tails (20-sample shards, slices of 8 or 7, a subset cutting runs)."""
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
