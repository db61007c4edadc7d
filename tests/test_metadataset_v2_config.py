"""``load_dataset(path).splits``: Energon's metadataset config objects
(``energon_lite/metadataset/metadataset_v2.py``), compared field by field with the objects
megatron-energon (the oracle) builds from the same files."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from energon_lite.compat.metadataset_api import load_dataset
from energon_lite.errors import DatasetFormatError
from energon_lite.metadataset.metadataset_v2 import (
    AuxDatasetReference,
    AuxFilesystemReference,
    BlendDatasetReference,
    MetadatasetBlend,
)

FILES = {
    "blend": """
splits:
  train:
    blend:
      - path: ds1
        weight: 2
        subflavors: {kind: a}
        aux:
          media: filesystem://media
          other: ds2
      - path: ds2
        weight: 1
        subset: {range: [10%, 50%]}
  val:
    path: ds1
    split_part: train
""",
    "epochized": """
splits:
  train:
    blend_epochized:
      - path: ds1
        repetitions: 3
      - path: ds2
        repetitions: 0.5
""",
}


def _folders(root: Path) -> None:
    for name in ("ds1", "ds2"):
        meta = root / name / ".nv-meta"
        meta.mkdir(parents=True)
        (meta / ".info.json").write_text("{}")
        (meta / "index.sqlite").write_text("{}")  # Energon checks that an aux dataset has one
    (root / "media").mkdir()


def describe(value: Any) -> Any:
    """Class names, public fields and paths as URLs: what both libraries must agree on."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {
            f.name: describe(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not f.name.startswith("_")
        }
        return type(value).__name__, fields
    if hasattr(value, "url") and hasattr(value, "local_path"):
        return "EPath", value.url
    if isinstance(value, dict):
        return {k: describe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    return value


def _write(root: Path, name: str) -> Path:
    path = root / f"{name}.yaml"
    path.write_text("__module__: megatron.energon\n__class__: MetadatasetV2\n" + FILES[name])
    return path


@pytest.mark.parametrize("name", sorted(FILES))
def test_splits_are_energons_config_objects(tmp_path: Path, name: str) -> None:
    energon_loader = pytest.importorskip("megatron.energon.metadataset.loader")
    from megatron.energon.epathlib import EPath as TheirEPath

    _folders(tmp_path)
    path = _write(tmp_path, name)
    ours = load_dataset(path).splits  # type: ignore[attr-defined]
    theirs = energon_loader.load_dataset(TheirEPath(path)).splits
    assert describe(ours) == describe(theirs)


def test_aux_references_and_paths(tmp_path: Path) -> None:
    _folders(tmp_path)
    train = load_dataset(_write(tmp_path, "blend")).splits["train"]  # type: ignore[attr-defined]
    assert isinstance(train, MetadatasetBlend)
    first = train.blend[0]
    assert isinstance(first, BlendDatasetReference) and first.weight == 2
    assert first.path.local_path() == tmp_path / "ds1"
    assert first.aux is not None
    media, other = first.aux["media"], first.aux["other"]
    assert isinstance(media, AuxFilesystemReference)
    assert media.fs_path.local_path() == tmp_path / "media"
    assert isinstance(other, AuxDatasetReference)
    assert other.path.local_path() == tmp_path / "ds2"


def test_aux_on_another_file_system(tmp_path: Path) -> None:
    path = tmp_path / "remote.yaml"
    path.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        "    path: s3://bucket/ds\n    aux:\n      media: filesystem+s3://bucket/media\n"
    )
    train = load_dataset(path).splits["train"]  # type: ignore[attr-defined]
    assert train.path.url == "s3://bucket/ds"
    assert isinstance(train.aux["media"], AuxFilesystemReference)
    assert train.aux["media"].fs_path.url == "s3://bucket/media"


def test_a_split_of_unknown_shape_names_the_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        "    datasets: [a]\n"
    )
    with pytest.raises(DatasetFormatError, match=r"bad.yaml: splits.train: .*needs one of path"):
        load_dataset(path).splits  # type: ignore[attr-defined]  # noqa: B018
