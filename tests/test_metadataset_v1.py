"""Energon's metadataset v1 files (and nested v1 files), the metadataset API names, and the
dataset factory adapters, with megatron.energon as the oracle for leaves, weights and
subflavors."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import oracle

import energon_lite as el
from energon_lite.epathlib import EPath
from energon_lite.metadataset.parse import load_metadataset
from energon_lite.synth.shards import write_captioning_shards

energon = oracle()

V1 = """__module__: megatron.energon
__class__: Metadataset
splits:
  train:
    datasets:
      - weight: 3
        path: a
        subflavor: first
        subflavors: {source: v1, number: 1}
        shuffle_over_epochs_multiplier: 2
      - path: b
        subflavors: {source: v1, number: 2}
  val:
    datasets:
      - {weight: 1, path: a, split_part: val}
      - {weight: 1, path: b, split_part: val}
"""

NESTED = """splits:
  train:
    datasets:
      - weight: 4
        path: ./v1.yaml
        subflavors: {outer: yes, number: 9}
      - weight: 1
        path: b
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("v1")
    for name, count in (("a", 40), ("b", 20)):
        write_captioning_shards(
            root / name, count, 10, image_size=(8, 8), key_format=name + "-{:03d}"
        )
        el.prepare_dataset(
            root / name,
            split_ratio=[("train", 1), ("val", 1)],
            sample_type="CaptioningSample",
            field_map={"image": "jpg", "caption": "txt"},
            progress=False,
        )
        config = yaml.safe_load((root / name / ".nv-meta/dataset.yaml").read_text())
        config["subflavors"] = {"from_yaml": name, "number": 0}
        (root / name / ".nv-meta/dataset.yaml").write_text(yaml.safe_dump(config))
    (root / "v1.yaml").write_text(V1)
    (root / "nested.yaml").write_text(NESTED)
    return root


def _summary(loaded: Any) -> list[tuple[str, float, dict]]:
    return [
        (Path(str(d.dataset.paths[0])).name, round(d.weight, 6), d.dataset.subflavors)
        for d in loaded.datasets
    ]


@pytest.mark.parametrize(("file", "split"), [("v1.yaml", "train"), ("v1.yaml", "val"),
                                             ("nested.yaml", "train")])  # fmt: skip
def test_leaves_weights_and_subflavors_match_energon(data: Path, file: str, split: str) -> None:
    wc = energon.WorkerConfig(rank=0, world_size=1, num_workers=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = energon.load_dataset(data / file)
        theirs.post_initialize()
        their_list = theirs.get_datasets(training=False, split_part=split, worker_config=wc)
        ours = el.load_dataset(data / file)
        our_list = ours.get_datasets(
            training=False, split_part=split, worker_config=el.WorkerConfig(0, 1, 0)
        )
    assert _summary(our_list) == _summary(their_list)
    assert our_list.blend_mode.name == their_list.blend_mode.name == "DATASET_WEIGHT"
    assert type(ours).__name__ == "Metadataset"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        their_refs = energon.traverse_metadataset(data / file, split_part=split)
        our_refs = el.traverse_metadataset(data / file, split_part=split)
    assert [(Path(str(r.path)).name, r.split_part, r.subflavors) for r in our_refs] == [
        (Path(str(r.path)).name, r.split_part, r.subflavors) for r in their_refs
    ]


def test_v1_blend_loads_and_trains(data: Path) -> None:
    with pytest.warns(DeprecationWarning, match="subflavor"):
        leaves, mode = load_metadataset(data / "nested.yaml", "train")
    assert mode == "weights" and [leaf.shuffle_over_epochs_multiplier for leaf in leaves] == [
        2, 1, 1
    ]  # fmt: skip
    with pytest.warns(DeprecationWarning, match=r"v1.yaml: splits.train.datasets\[0\].subflavor"):
        ds = el.get_train_dataset(
            data / "v1.yaml",
            worker_config=el.WorkerConfig(0, 1, 0),
            batch_size=None,
            shuffle_buffer_size=None,
            max_samples_per_sequence=5,
        )
    seen: dict[str, int] = {"a": 0, "b": 0}
    for sample, _ in zip(el.get_loader(ds), range(400)):
        seen[sample.__key__[0]] += 1
        if sample.__key__[0] == "a":
            assert sample.__subflavors__ == {
                "__subflavor__": "first", "source": "v1", "number": 1, "from_yaml": "a"
            }  # fmt: skip
    assert 0.65 < seen["a"] / 400 < 0.85  # weights 3 : 1


def test_missing_weight_and_repetitions_default_to_one(data: Path) -> None:
    (data / "defaults.yaml").write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n"
        "  train:\n    blend:\n      - path: a\n      - {path: b, weight: 3}\n"
        "  val:\n    blend_epochized:\n      - {path: a, split_part: val}\n"
        "      - {path: b, split_part: val, repetitions: 2}\n"
    )
    leaves, mode = load_metadataset(data / "defaults.yaml", "train")
    assert mode == "weights" and [leaf.weight for leaf in leaves] == [0.25, 0.75]
    leaves, mode = load_metadataset(data / "defaults.yaml", "val")
    assert mode == "epochized" and [leaf.repetitions for leaf in leaves] == [1, 2]


# V1 uses Energon's deprecated subflavor key; test_v1_blend_loads_and_trains asserts its warning
@pytest.mark.filterwarnings("ignore:.*subflavor is Energon's deprecated key:DeprecationWarning")
def test_v1_errors_name_the_file_and_the_v1_key(data: Path) -> None:
    bad = data / "bad_v1.yaml"
    bad.write_text(V1.replace("weight: 3", "weight: -3"))
    with pytest.raises(
        el.DatasetFormatError, match=r"bad_v1.yaml: splits.train.datasets\[0\].weight"
    ):
        load_metadataset(bad, "train")
    bad.write_text(V1.replace("      - path: b\n", "      - path: b\n        wieght: 2\n"))
    with pytest.raises(el.DatasetFormatError, match=r"datasets\[1\].wieght: unknown key"):
        load_metadataset(bad, "train")
    bad.write_text(V1.replace("path: b", "path: missing"))
    with pytest.raises(el.DatasetFormatError, match="missing does not exist"):
        el.prepare_metadataset(bad)
    el.prepare_metadataset(data / "nested.yaml")  # all splits resolve


def test_get_val_datasets_gives_one_dataset_per_leaf(data: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        per_leaf = el.get_val_datasets(
            data / "v1.yaml", worker_config=el.WorkerConfig(0, 1, 0), batch_size=5
        )
    assert [Path(source.paths[0]).name for _, source in per_leaf] == ["a", "b"]
    for (dataset, source), name, count in zip(per_leaf, "ab", (20, 10)):
        keys = [k for batch in el.get_loader(dataset) for k in batch.__key__]
        assert len(keys) == count and {k[0] for k in keys} == {name}
        assert len(source) == count


def test_prepare_dataset_classmethod_like_energons(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    write_captioning_shards(ours, 60, 10, image_size=(8, 8))
    shutil.copytree(ours, theirs)
    names = sorted(p.name for p in ours.rglob("*.tar"))
    paths = [str(p.relative_to(ours)) for p in sorted(ours.rglob("*.tar"))]
    parts, counts = el.BaseWebdatasetFactory.prepare_dataset(
        ours, paths, split_parts_ratio=[("train", 4), ("val", 2)], shuffle_seed=42
    )
    energon.BaseWebdatasetFactory.prepare_dataset(
        theirs, paths, split_parts_ratio=[("train", 4), ("val", 2)], shuffle_seed=42, workers=1
    )
    assert {"jpg", "txt"} <= parts and [c for _, c in counts] == [10] * len(names)
    mine = yaml.safe_load((ours / ".nv-meta/split.yaml").read_text())["split_parts"]
    their = yaml.safe_load((theirs / ".nv-meta/split.yaml").read_text())["split_parts"]
    from energon_lite.shards.meta import expand

    assert {k: expand(v) for k, v in mine.items()} == {k: expand(v) for k, v in their.items()}
    (ours / ".nv-meta/dataset.yaml").write_text(
        "sample_type: {__module__: megatron.energon, __class__: CaptioningSample}\n"
        "field_map: {image: jpg, caption: txt}\n"
    )
    factory = el.StandardWebdatasetFactory(
        ours, split_part="val", training=False, worker_config=el.WorkerConfig(0, 1, 0)
    )
    assert len(factory) == 20 and factory.paths == [ours]
    samples = list(el.get_loader(factory.build()))
    assert len(samples) == 20 and isinstance(samples[0], el.CaptioningSample)
    with pytest.warns(DeprecationWarning, match="__class__: CaptioningSample"):
        el.CaptioningWebdataset(ours, split_part="train", worker_config=el.WorkerConfig(0, 1, 0))
    with pytest.raises(el.ConfigError, match="split_parts_ratio"):
        el.BaseWebdatasetFactory.prepare_dataset(ours, paths)


def test_traverse_lists_datasets_that_are_not_there_yet(data: Path) -> None:
    """traverse_metadataset reads only the metadataset files, as Energon's does (to fetch the
    datasets it names before training): a missing leaf folder is listed with its aux sources
    and subflavors; loading the same file still refuses it, naming it."""
    (data / "later.yaml").write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n"
        "  train:\n    blend:\n"
        "      - {weight: 1, path: a, subflavors: {kind: here}}\n"
        "      - weight: 2\n        path: not_fetched_yet\n        subflavors: {kind: later}\n"
        "        aux: {labels: missing_aux, media: 'filesystem://media'}\n"
    )  # fmt: skip
    ours = el.traverse_metadataset(data / "later.yaml", split_part="train")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = energon.traverse_metadataset(data / "later.yaml", split_part="train")

    def view(refs: list[Any]) -> list[tuple]:
        return [
            (str(r.path), r.split_part, {k: str(v) for k, v in r.aux.items()}, r.subflavors)
            for r in refs
        ]

    assert view(ours) == view(theirs)
    # Energon's path type, as Energon returns it: equal to EPath of the same folder
    assert {type(r.path).__name__ for r in theirs} == {type(r.path).__name__ for r in ours}
    assert [r.path for r in ours] == [EPath(data / "a"), EPath(data / "not_fetched_yet")]
    assert ours[1].aux == {"labels": EPath(data / "missing_aux"), "media": EPath(data / "media")}
    assert view(ours)[1] == (
        str(data / "not_fetched_yet"), "train",
        {"labels": str(data / "missing_aux"), "media": str(data / "media")}, {"kind": "later"},
    )  # fmt: skip
    with pytest.raises(
        el.DatasetFormatError, match=r"blend\[1\].path: .*not_fetched_yet does not exist"
    ):
        el.get_train_dataset(
            data / "later.yaml", worker_config=el.WorkerConfig(0, 1, 0), batch_size=None,
            shuffle_buffer_size=None, max_samples_per_sequence=None,
        )  # fmt: skip
    (data / "later.yaml").unlink()
