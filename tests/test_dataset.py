"""PreparedDataset: exact bytes by random access, runs with excludes and subsets, flat memory."""

from __future__ import annotations

import json
import tarfile
import tracemalloc
from pathlib import Path

import pytest
import yaml

from energon_lite.errors import DatasetFormatError
from energon_lite.shards.dataset import PreparedDataset


def _tar_samples(path: Path) -> dict[str, dict[str, bytes]]:
    out: dict[str, dict[str, bytes]] = {}
    with tarfile.open(path) as tar:
        for member in tar:
            key, part = member.name.split(".", 1)
            out.setdefault(key, {})[part] = tar.extractfile(member).read()
    return out


def test_random_access_returns_exact_bytes(split_ds: Path) -> None:
    ds = PreparedDataset(split_ds, "train")
    assert len(ds) == 160 and ds.num_runs == 8
    for position in [0, 19, 20, 77, 159]:
        shard_id, index = ds.locate(position)
        key, parts = ds.read(shard_id, index)
        expected = _tar_samples(split_ds / ds.shard_names[shard_id])
        assert key == f"{shard_id * 20 + index:06d}"
        assert parts == expected[key]
    window = ds.read_range(3, 5, 12)
    assert [k for k, _ in window] == [f"{60 + i:06d}" for i in range(5, 12)]
    with pytest.raises(IndexError):
        ds.read_range(3, 15, 25)


def test_excludes_subset_and_legacy_files(tmp_path: Path, dataset_factory) -> None:
    root = dataset_factory(tmp_path / "d", 60, 20)
    split_path = root / ".nv-meta/split.yaml"
    split = yaml.safe_load(split_path.read_text())
    split["exclude"] = ["parts/data-0.tar", "parts/data-1.tar/0000{21..23}"]
    split_path.write_text(yaml.safe_dump(split))
    ds = PreparedDataset(root, "train")
    keys = [ds.read(*ds.locate(p))[0] for p in range(len(ds))]
    assert len(keys) == 37 and "000021" not in keys and "000000" not in keys and keys[0] == "000020"
    sub = PreparedDataset(root, "train", subset=("0%", "50%"))
    assert len(sub) == 18 and sub.read(*sub.locate(0))[0] == "000020"
    tail = PreparedDataset(root, "train", subset=(30, "end"))
    assert len(tail) == 7
    # legacy .info.yaml and split.json
    info = json.loads((root / ".nv-meta/.info.json").read_text())
    (root / ".nv-meta/.info.json").unlink()
    (root / ".nv-meta/.info.yaml").write_text(yaml.safe_dump(info))
    split_path.unlink()
    (root / ".nv-meta/split.json").write_text(
        json.dumps({"split_parts": {"train": ["parts/data-{0..2}.tar"]}})
    )
    assert len(PreparedDataset(root, "train")) == 60


def test_clear_errors(tmp_path: Path, dataset_factory) -> None:
    root = dataset_factory(tmp_path / "d", 40, 20)
    with pytest.raises(
        DatasetFormatError, match=r"split\.yaml: no split 'validation'; it has \['train'\]"
    ):
        PreparedDataset(root, "validation")
    (root / "parts/data-1.tar.idx").write_bytes(b"\0" * 16)
    for record in (True, False):  # found at the shard's first read, with a record or without
        if not record:  # as Energon prepares it
            (root / ".nv-meta/energon_lite.json").unlink()
        ds = PreparedDataset(root, "train")
        with pytest.raises(
            DatasetFormatError, match=r"data-1\.tar\.idx: has 16 bytes, expected 168"
        ):
            ds.read(1, 0)
    (root / ".nv-meta/split.yaml").write_text("split_parts: {train: [parts/data-0.tar}\n")
    with pytest.raises(DatasetFormatError, match=r"split\.yaml:1:\d+: YAML syntax error"):
        PreparedDataset(root, "train")
    with pytest.raises(DatasetFormatError, match=r"subset bound 'half'"):
        dataset_factory(tmp_path / "e", 20, 20)
        PreparedDataset(tmp_path / "e", "train", subset=("half", "end"))


def test_opening_ten_million_samples_allocates_little(tmp_path: Path) -> None:
    """No per-sample Python objects: a 10M-sample split opens in a few hundred KB."""
    meta = tmp_path / ".nv-meta"
    meta.mkdir()
    shards = {f"parts/s-{i:05d}.tar": 10_000 for i in range(1000)}
    (meta / ".info.json").write_text(json.dumps({"energon_version": "x", "shard_counts": shards}))
    (meta / "split.yaml").write_text(
        yaml.safe_dump({"split_parts": {"train": ["parts/s-{00000..00999}.tar"]}})
    )
    (meta / "dataset.yaml").write_text(
        yaml.safe_dump({"__module__": "energon_lite", "__class__": "CrudeWebdataset"})
    )
    tracemalloc.start()
    ds = PreparedDataset(tmp_path, "train")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(ds) == 10_000_000
    assert peak < 2_000_000, f"opening allocated {peak} bytes"
    assert ds.locate(9_999_999) == (999, 9_999)


def test_corrupt_tar_index_offsets_are_format_errors(tmp_path: Path, dataset_factory) -> None:
    import numpy as np

    root = dataset_factory(tmp_path / "ds", 40, 20)
    idx = root / "parts/data-0.tar.idx"
    offsets = np.fromfile(idx, dtype="<u8")
    for corrupt in (
        [offsets[1], *offsets[1:3], offsets[0], *offsets[4:]],  # going backwards
        [*offsets[:-1], 2**40],  # past the end of the shard (the old reader allocated 1 TB)
    ):
        np.asarray(corrupt, dtype="<u8").tofile(idx)
        dataset = PreparedDataset(root, "train")
        with pytest.raises(DatasetFormatError, match=r"data-0.tar.idx: offsets of samples"):
            dataset.read_range(0, 0, 20)
        dataset.close()


@pytest.mark.timeout(60)
def test_split_brace_patterns_are_bounded_by_the_shards_present(
    tmp_path: Path, dataset_factory
) -> None:
    root = dataset_factory(tmp_path / "ds", 40, 20)  # 2 shards
    split = root / ".nv-meta/split.yaml"
    bomb = "parts/data-{0..99999999}.tar"  # braceexpand made all 10**8 names (3.6 GB) first
    split.write_text(yaml.safe_dump({"split_parts": {"train": [bomb]}}))
    tracemalloc.start()
    try:
        with pytest.raises(DatasetFormatError) as error:
            PreparedDataset(root, "train")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000, peak
    assert str(error.value) == (
        f"{split}: split_parts.'train': pattern '{bomb}' expands to 100000000 names; with the "
        "0 before it that is more than 2 shards (the dataset has 2)"
    )
    split.write_text(yaml.safe_dump({"split_parts": {"train": ["parts/data-{0..1"]}}))
    with pytest.raises(DatasetFormatError, match=r"pattern 'parts/data-\{0..1': unbalanced"):
        PreparedDataset(root, "train")
    # exclusions may name samples too: bounded by shards + samples
    split.write_text(
        yaml.safe_dump(
            {
                "split_parts": {"train": ["parts/data-{0..1}.tar"]},
                "exclude": ["parts/data-0.tar/{000000..000099}"],
            }
        )
    )
    with pytest.raises(DatasetFormatError, match=r"exclude: pattern .* more than 42 shards and"):
        PreparedDataset(root, "train")


def test_brace_counts_match_braceexpand() -> None:
    """The bound is computed with braceexpand's own grammar (checked on random patterns)."""
    import random

    import braceexpand

    from energon_lite.shards.bounded import count_names

    rng = random.Random(7)
    pieces = ["{", "}", ",", "..", "1", "0", "-", "a", "Z", "\\", "03", "{1..4}", "{a..e..2}"]
    for _ in range(3000):
        pattern = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
        try:
            expected: int | str = len(list(braceexpand.braceexpand(pattern)))
        except braceexpand.UnbalancedBracesError:
            expected = "unbalanced"
        try:
            counted: int | str = count_names(pattern)
        except ValueError:
            counted = "unbalanced"
        assert counted == expected, pattern


def test_unknown_keys_are_named_with_the_closest_known_key(tmp_path: Path, dataset_factory):
    root = dataset_factory(tmp_path / "ds", 40, 20)
    meta = root / ".nv-meta"
    split = (meta / "split.yaml").read_text()
    (meta / "split.yaml").write_text(split.replace("split_parts:", "split_part:"))
    with pytest.raises(DatasetFormatError) as error:
        PreparedDataset(root, "train")
    assert "split.yaml: unknown key 'split_part' (did you mean 'split_parts'?)" in str(error.value)
    (meta / "split.yaml").write_text(split)
    config = (meta / "dataset.yaml").read_text()
    (meta / "dataset.yaml").write_text(config.replace("field_map:", "feild_map:"))
    with pytest.raises(DatasetFormatError) as error:
        PreparedDataset(root, "train")
    assert "dataset.yaml: unknown key 'feild_map' (did you mean 'field_map'?)" in str(error.value)
