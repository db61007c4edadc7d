"""``info``, ``preview`` and ``lint`` accept a metadataset YAML, as ``bench`` and the Python API
do (issue 26, item 9): each split's datasets with the blend's weights or per-epoch quotas."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest
from conftest import make_dataset

from energon_lite.cli import main

META = """\
__module__: megatron.energon
__class__: MetadatasetV2
splits:
  train:
    {blend}:
      - {number}: {first}
        path: one
      - {number}: {second}
        path: two
        subflavors:
          origin: second
  val:
    path: two
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("meta")
    make_dataset(root / "one", 40, 10)
    make_dataset(root / "two", 40, 10, split_ratio=[("train", 1), ("val", 1)])
    (root / "weights.yaml").write_text(
        META.format(blend="blend", number="weight", first=3, second=1)
    )
    (root / "quotas.yaml").write_text(
        META.format(blend="blend_epochized", number="repetitions", first=2, second=0.5)
    )
    return root


def test_info_shows_the_blends_options_and_the_weights_as_written(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    meta = data / "stratified.yaml"
    text = META.format(blend="blend", number="weight", first=9, second=1)
    meta.write_text(text.replace("    blend:", "    batch_composition: stratified\n    blend:"))
    assert main(["info", str(meta)]) == 0
    out = capsys.readouterr().out
    assert "split train: blend: samples drawn by weight, batch_composition: stratified\n" in out
    assert "40 samples, weight 9 (90.0% of samples)" in out  # the YAML's 9, not its share 0.9


def test_info_shows_the_weights_and_each_dataset(data: Path, capsys) -> None:
    assert main(["info", str(data / "weights.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"metadataset {data / 'weights.yaml'}\n  split train: blend")
    assert f"{data / 'one'} (split train): 40 samples, weight 3 (75.0% of samples)" in out
    assert "weight 1 (25.0% of samples), subflavors {'origin': 'second'}" in out
    assert f"  split val: one dataset\n    {data / 'two'} (split val): 20 samples" in out
    # then each dataset's own section, once
    assert out.count(f"dataset {data / 'one'}\n  total: 40 samples, 4 shards") == 1
    assert out.count(f"dataset {data / 'two'}\n  total: 40 samples, 4 shards") == 1


def test_info_shows_the_epoch_quotas(data: Path, capsys) -> None:
    assert main(["info", str(data / "quotas.yaml")]) == 0
    out = capsys.readouterr().out
    assert "split train: blend_epochized" in out
    assert f"{data / 'one'} (split train): 40 samples, repetitions 2 = 80 per epoch" in out
    assert f"{data / 'two'} (split train): 20 samples, repetitions 0.5 = 10 per epoch" in out


def test_preview_shows_each_dataset_of_the_split(data: Path, capsys) -> None:
    assert main(["preview", str(data / "weights.yaml"), "-n", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith("== ")] == [
        f"== {data / 'one'} (split train): 40 samples, weight 3 (75.0% of samples)",
        f"== {data / 'two'} (split train): 20 samples, weight 1 (25.0% of samples), "
        "subflavors {'origin': 'second'}",
    ]
    assert sum("image (torch.Tensor | typing.Any): Tensor(3, 16, 16)" in line for line in out) == 2
    assert main(["preview", str(data / "weights.yaml"), "--split-part", "val", "-n", "1"]) == 0
    assert capsys.readouterr().out.startswith(f"== {data / 'two'} (split val): 20 samples\n")


def test_lint_checks_every_dataset_a_split_reads(
    data: Path, tmp_path: Path, dataset_factory, capsys
) -> None:
    assert main(["lint", "--quiet", str(data / "weights.yaml")]) == 0
    assert capsys.readouterr().out == "0 problem(s)\n"
    broken = dataset_factory(tmp_path / "two", 40, 10, split_ratio=[("train", 1), ("val", 1)])
    shard = broken / "parts/data-3.tar"  # in val
    with tarfile.open(shard) as tar:
        member = tar.getmember("000031.jpg")
    data_bytes = bytearray(shard.read_bytes())
    data_bytes[member.offset_data : member.offset_data + 64] = b"\0" * 64  # a corrupt JPEG
    before = shard.stat()
    shard.write_bytes(bytes(data_bytes))
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))  # bit rot: same size and mtime
    (tmp_path / "one").symlink_to(data / "one")
    (tmp_path / "meta.yaml").write_text((data / "weights.yaml").read_text())
    assert main(["lint", "--quiet", str(tmp_path / "meta.yaml")]) == 1
    out = capsys.readouterr().out
    assert f"val: {broken} (split val): parts/data-3.tar #1 000031: MediaDecodeError" in out
    assert out.endswith("1 problem(s)\n")
    assert main(["lint", "--quiet", "--split-parts", "train", str(tmp_path / "meta.yaml")]) == 0


def test_a_bad_metadataset_is_named_with_its_key(tmp_path: Path, capsys) -> None:
    (tmp_path / "bad.yaml").write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        "    path: missing\n"
    )
    assert main(["info", str(tmp_path / "bad.yaml")]) == 1
    err = capsys.readouterr().err
    assert "missing" in err and ".nv-meta: no .info.json" not in err
