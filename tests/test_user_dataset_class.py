"""A ``dataset.yaml`` naming the user's own factory class (Megatron-Bridge's form): the same
user module, once per library, loads the same samples in energon_lite as in megatron-energon,
decoded by the webdataset ``Decoder`` the class installs as ``self._decoder``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from conftest import oracle

import energon_lite as el
from energon_lite.errors import DatasetFormatError
from energon_lite.synth.shards import write_captioning_shards

energon = oracle("megatron.energon", "webdataset")

USER_MODULE = """
from webdataset.autodecode import Decoder, imagehandler

from {lib} import CaptioningSample, DefaultDecoderWebdatasetFactory


def upper_text(key, data):
    if key.endswith("txt"):
        return data.decode().upper()
    return None


class UpperCaptions(DefaultDecoderWebdatasetFactory[CaptioningSample]):
    __sample_type__ = CaptioningSample

    def __init__(self, path, **kwargs):
        kwargs.pop("decoder", None)
        super().__init__(path, decoder=None, **kwargs)
        self.built_with_path = path
        self._decoder = Decoder([imagehandler("pil"), upper_text])


class RawParts(DefaultDecoderWebdatasetFactory[CaptioningSample]):
    __sample_type__ = CaptioningSample

    def __init__(self, path, **kwargs):
        kwargs["decoder"] = None
        super().__init__(path, **kwargs)
"""


def _dataset(root: Path, module: str, cls: str = "UpperCaptions") -> Path:
    write_captioning_shards(root, 30, 10, image_size=(16, 12))
    el.prepare_dataset(
        root,
        split_ratio=[("val", 1)],
        sample_type="CaptioningSample",
        field_map={"image": "jpg", "caption": "txt"},
        progress=False,
    )
    config = {
        "__module__": module,
        "__class__": cls,
        "field_map": {"image": "jpg", "caption": "txt"},
    }
    (root / ".nv-meta/dataset.yaml").write_text(yaml.safe_dump(config))
    return root


@pytest.fixture
def user_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    code = tmp_path / "code"
    code.mkdir()
    for lib, name in (("energon_lite", "ours"), ("megatron.energon", "theirs")):
        (code / f"bridge_user_{name}.py").write_text(USER_MODULE.format(lib=lib))
    monkeypatch.syspath_prepend(str(code))
    yield code
    for name in ("ours", "theirs"):
        sys.modules.pop(f"bridge_user_{name}", None)


def _samples(lib, root: Path) -> dict:
    dataset = lib.get_val_dataset(
        root, worker_config=lib.WorkerConfig(rank=0, world_size=1, num_workers=0), batch_size=None
    )
    return {s.__key__: s for s in lib.get_loader(dataset)}


@pytest.mark.usefixtures("collector_spared")  # Energon collects garbage
def test_user_factory_class_loads_as_in_energon(tmp_path: Path, user_modules: Path) -> None:
    ours = _samples(el, _dataset(tmp_path / "ours", "bridge_user_ours"))
    theirs = _samples(energon, _dataset(tmp_path / "theirs", "bridge_user_theirs"))
    assert sorted(ours) == sorted(theirs) and len(ours) == 30
    for key, sample in ours.items():
        assert type(sample) is el.CaptioningSample
        # the class's own decoder ran: upper-cased text and PIL images, as in Energon
        assert sample.caption == theirs[key].caption and sample.caption.isupper()
        assert type(sample.image) is type(theirs[key].image)
        assert sample.image.size == theirs[key].image.size == (16, 12)


@pytest.mark.usefixtures("collector_spared")  # Energon collects garbage
def test_a_class_without_a_decoder_gives_raw_bytes_as_in_energon(
    tmp_path: Path, user_modules: Path
) -> None:
    ours = _samples(el, _dataset(tmp_path / "ours", "bridge_user_ours", "RawParts"))
    theirs = _samples(energon, _dataset(tmp_path / "theirs", "bridge_user_theirs", "RawParts"))
    assert sorted(ours) == sorted(theirs) and len(ours) == 30
    for key, sample in ours.items():
        assert isinstance(sample.image, bytes) and sample.image == theirs[key].image
        assert sample.caption == theirs[key].caption


def test_energons_decoder_keywords_and_attributes(tmp_path: Path) -> None:
    root = _dataset(tmp_path, "unused")
    (root / ".nv-meta/dataset.yaml").write_text(
        "sample_type: {__module__: megatron.energon, __class__: CaptioningSample}\n"
        "field_map: {image: jpg, caption: txt}\n"
    )
    wc = el.WorkerConfig(rank=0, world_size=1, num_workers=0)
    common = {"split_part": "val", "training": False, "worker_config": wc}
    default = el.DefaultDecoderWebdatasetFactory(root, **common)
    assert (default.image_decode, default.av_decode) == ("torchrgb", "AVDecoder")
    assert (default.ignore_decoder_errors, default.video_decode_audio) == (False, False)
    assert default._decoder is not None and default._video_decoder is None
    assert len(default) == 30
    for raw in ({"auto_decode": False}, {"decoder": None}):
        assert el.DefaultDecoderWebdatasetFactory(root, **common, **raw)._decoder is None
    tuned = el.DefaultDecoderWebdatasetFactory(root, **common, image_decode="pil")
    assert tuned.image_decode == "pil"
    with pytest.raises(el.ConfigError, match="unsupported arguments"):
        el.DefaultDecoderWebdatasetFactory(root, **common, no_such_option=1)


def test_a_class_that_is_no_dataset_factory_is_refused(tmp_path: Path) -> None:
    root = _dataset(tmp_path, "os")
    config = yaml.safe_load((root / ".nv-meta/dataset.yaml").read_text())
    for cls in ("system", "PathLike"):
        config["__class__"] = cls
        (root / ".nv-meta/dataset.yaml").write_text(yaml.safe_dump(config))
        with pytest.raises(DatasetFormatError, match=r"dataset\.yaml.*refused"):
            el.get_val_dataset(root, worker_config=el.WorkerConfig(0, 1, 0), batch_size=None)


def test_a_class_file_planted_in_the_dataset_or_a_cache_folder_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _dataset(tmp_path / "data", "planted_factory")
    cache = tmp_path / "meta.yaml.cache"
    cache.mkdir()
    for folder in (root / ".nv-meta", root, cache):
        (folder / "planted_factory.py").write_text(USER_MODULE.format(lib="energon_lite"))
        monkeypatch.syspath_prepend(str(folder))
        sys.modules.pop("planted_factory", None)
        with pytest.raises(DatasetFormatError, match=r"planted_factory.*refused.*folder"):
            el.get_val_dataset(root, worker_config=el.WorkerConfig(0, 1, 0), batch_size=None)
        (folder / "planted_factory.py").unlink()
        monkeypatch.undo()
        assert "planted_factory" not in sys.modules  # refused before it was imported
