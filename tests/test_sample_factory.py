"""Typed samples from dataset.yaml: field_map with json access, sample_loader.py, crude."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from energon_lite import CaptioningSample, SampleDecoder, TextSample
from energon_lite.errors import DatasetFormatError
from energon_lite.samples.factory import SampleFactory
from energon_lite.shards.dataset import PreparedDataset


def _raw(ds: PreparedDataset, position: int) -> dict:
    shard_id, index = ds.locate(position)
    key, parts = ds.read(shard_id, index)
    return {"__key__": key, "__restore_key__": ("Webdataset", 0, shard_id, index, 0), **parts}


def _meta(root: Path) -> Path:
    return root / ".nv-meta"


def test_field_map_with_json_access(tmp_path: Path, dataset_factory) -> None:
    root = dataset_factory(tmp_path / "d", 20, 10)
    config = {
        "sample_type": {"__module__": "energon_lite", "__class__": "CaptioningSample"},
        "field_map": {"image": "jpg", "caption": "json[caption]"},
    }
    factory = SampleFactory(config, _meta(root))
    ds = PreparedDataset(root, "train")
    sample = factory.build(_raw(ds, 3), SampleDecoder(), {"source": "x"})
    assert isinstance(sample, CaptioningSample)
    assert sample.__key__ == "000003" and sample.__subflavors__ == {"source": "x"}
    assert sample.caption.startswith("sample 3:")
    assert sample.image.shape == (3, 16, 16)
    tags = SampleFactory(
        {
            "sample_type": {"__module__": "megatron.energon", "__class__": "TextSample"},
            "field_map": {"text": "json[tags][1]"},
        },
        _meta(root),
    )
    assert tags.build(_raw(ds, 5), SampleDecoder(), None).text == 5 % 3
    missing = SampleFactory(
        {
            "sample_type": {"__module__": "energon_lite", "__class__": "TextSample"},
            "field_map": {"text": "md"},
        },
        _meta(root),
    )
    with pytest.raises(
        DatasetFormatError,
        match=r"sample '000005': field 'text' needs part 'md'; the sample has \['jpg', 'json', 'txt'\]",
    ):
        missing.build(_raw(ds, 5), SampleDecoder(), None)


def test_sample_loader_and_part_filter(tmp_path: Path, dataset_factory) -> None:
    root = dataset_factory(tmp_path / "d", 20, 10)
    (_meta(root) / "loader.py").write_text(
        "def sample_loader(raw):\n"
        "    return {'text': raw['txt'].upper() + str(sorted(k for k in raw if not k.startswith('__')))}\n"
        "def part_filter(part):\n    return part == 'txt'\n"
    )
    config = {
        "sample_type": {"__module__": "megatron.energon", "__class__": "TextSample"},
        "sample_loader": "loader.py:sample_loader",
        "part_filter": "loader.py:part_filter",
    }
    (_meta(root) / "dataset.yaml").write_text(yaml.safe_dump(config))
    ds = PreparedDataset(root, "train")
    sample = SampleFactory(ds.config, _meta(root)).build(_raw(ds, 0), SampleDecoder(), None)
    assert (
        isinstance(sample, TextSample)
        and sample.text.startswith("SAMPLE 0:")
        and sample.text.endswith("['txt']")
    )
    bad = dict(config, sample_loader="loader.py:nope")
    with pytest.raises(DatasetFormatError, match=r"loader\.py defines no function 'nope'"):
        SampleFactory(bad, _meta(root))


def test_a_sample_loader_may_set_the_key_and_nothing_else_dunder(
    tmp_path: Path, dataset_factory
) -> None:
    """As in Energon: ``__key__`` from the sample_loader replaces the sample's key; the
    restore key, subflavors and sources stay the loader's own."""
    root = dataset_factory(tmp_path / "d", 20, 10)
    (_meta(root) / "loader.py").write_text(
        "def sample_loader(raw):\n"
        "    return {'__key__': '<SL>' + raw['__key__'], '__restore_key__': 'forged',\n"
        "            '__subflavors__': {'forged': 1}, 'text': raw['txt']}\n"
    )
    config = {
        "sample_type": {"__module__": "megatron.energon", "__class__": "TextSample"},
        "sample_loader": "loader.py:sample_loader",
    }
    (_meta(root) / "dataset.yaml").write_text(yaml.safe_dump(config))
    ds = PreparedDataset(root, "train")
    raw = _raw(ds, 0)
    sample = SampleFactory(ds.config, _meta(root)).build(raw, SampleDecoder(), {"a": 1})
    assert sample.__key__ == "<SL>" + raw["__key__"]
    assert sample.__restore_key__ == raw["__restore_key__"] and sample.__subflavors__ == {"a": 1}


def test_crude_and_bad_types(tmp_path: Path, dataset_factory) -> None:
    root = dataset_factory(tmp_path / "d", 10, 10)
    ds = PreparedDataset(root, "train")
    crude = SampleFactory(
        {"__module__": "megatron.energon", "__class__": "CrudeWebdataset"}, _meta(root)
    )
    sample = crude.build(_raw(ds, 1), SampleDecoder(), {"k": 1})
    assert sample["__key__"] == "000001" and sample["__subflavors__"] == {"k": 1}
    assert isinstance(sample["jpg"], torch.Tensor) and sample["txt"].startswith("sample 1")
    with pytest.raises(
        DatasetFormatError,
        match=r"sample_type megatron\.energon\.PictureSample is not a built-in type",
    ):
        SampleFactory(
            {
                "sample_type": {"__module__": "megatron.energon", "__class__": "PictureSample"},
                "field_map": {},
            },
            _meta(root),
        )
    with pytest.raises(DatasetFormatError, match="needs 'field_map' or 'sample_loader'"):
        SampleFactory(
            {"sample_type": {"__module__": "energon_lite", "__class__": "TextSample"}}, _meta(root)
        )


def test_shards_written_by_webdataset_with_png_and_npy(tmp_path: Path) -> None:
    """webdataset's own ShardWriter output prepares and loads: PNG images, npy arrays, json."""
    import io

    import numpy as np
    import webdataset as wds
    from PIL import Image

    from energon_lite import (
        ImageClassificationSample,
        WorkerConfig,
        get_loader,
        get_train_dataset,
        prepare_dataset,
    )

    (tmp_path / "shards").mkdir()
    with wds.ShardWriter(str(tmp_path / "shards/part-%03d.tar"), maxcount=10) as sink:
        for i in range(25):
            png = io.BytesIO()
            Image.fromarray(np.full((5, 7, 3), i, dtype=np.uint8)).save(png, format="PNG")
            sink.write(
                {
                    "__key__": f"k{i:03d}",
                    "png": png.getvalue(),
                    "npy": np.arange(i + 1),
                    "json": {"label": i % 3, "name": f"class {i % 3}"},
                }
            )
    prepare_dataset(
        tmp_path,
        split_ratio=[("train", 1)],
        sample_type="ImageClassificationSample",
        field_map={"image": "png", "label": "json[label]", "label_name": "json[name]"},
        progress=False,
    )
    ds = get_train_dataset(
        tmp_path,
        worker_config=WorkerConfig(0, 1, 0),
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        repeat=False,
    )
    samples = {s.__key__: s for s in get_loader(ds)}
    assert len(samples) == 25 and isinstance(samples["k007"], ImageClassificationSample)
    assert samples["k007"].image.shape == (3, 5, 7) and torch.allclose(
        samples["k007"].image, torch.full((3, 5, 7), 7 / 255)
    )
    assert (samples["k008"].label, samples["k008"].label_name) == (2, "class 2")
    raw = PreparedDataset(tmp_path, "train")
    key, parts = raw.read(*raw.locate(4))
    assert key == "k004" and np.load(io.BytesIO(parts["npy"])).tolist() == list(range(5))


def _energon_text_dataset(root: Path) -> Path:
    """25 text samples in shards of 10, prepared by megatron-energon."""
    import io
    import tarfile

    from megatron.energon.flavors import BaseWebdatasetFactory

    (root / "parts").mkdir(parents=True)
    for shard in range(3):
        with tarfile.open(root / "parts" / f"data-{shard}.tar", "w") as tar:
            for index in range(shard * 10, min(25, shard * 10 + 10)):
                data = f"text {index}".encode()
                info = tarfile.TarInfo(f"{index:06d}.txt")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    BaseWebdatasetFactory.prepare_dataset(
        root, ["parts/data-{0..2}.tar"], split_parts_ratio=[("train", 1.0)], shuffle_seed=None,
        workers=1, media_filter=None,
    )  # fmt: skip
    (root / ".nv-meta" / "dataset.yaml").write_text(
        "sample_type:\n  __module__: megatron.energon\n  __class__: TextSample\n"
        "field_map:\n  text: txt\n"
    )
    return root


@pytest.mark.usefixtures("collector_spared")  # Energon collects garbage
def test_sources_name_the_dataset_and_index_as_energon(tmp_path: Path) -> None:
    """``__sources__``: the dataset's EPath and the sample's index in the whole dataset (not
    in its shard), as megatron-energon (the oracle) gives them for every sample."""
    energon = pytest.importorskip("megatron.energon")
    import energon_lite as el

    root = _energon_text_dataset(tmp_path / "texts")

    def sources(lib: object, sample_type: type) -> dict[str, tuple]:
        wc = lib.WorkerConfig(rank=0, world_size=1, num_workers=0)  # type: ignore[attr-defined]
        dataset = lib.get_train_dataset(  # type: ignore[attr-defined]
            root, batch_size=None, worker_config=wc, shuffle_buffer_size=None,
            max_samples_per_sequence=None,
        )  # fmt: skip
        out = {}
        for _, sample in zip(range(25), lib.get_loader(dataset)):  # type: ignore[attr-defined]
            (source,) = sample.__sources__
            assert isinstance(source.dataset_path, sample_type)
            out[sample.__key__] = (
                str(source.dataset_path),
                source.index,
                source.shard_name,
                source.file_names,
            )
        return out

    from megatron.energon.epathlib import EPath as TheirEPath

    from energon_lite.epathlib import EPath

    ours, theirs = sources(el, EPath), sources(energon, TheirEPath)
    assert len(ours) == 25 and ours == theirs
    assert ours["000021"][1:3] == (21, "parts/data-2.tar")
