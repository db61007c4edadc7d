"""Energon's ``JoinedWebdatasetFactory`` (a join built in code) and ``FileStoreDecoder``."""

from __future__ import annotations

from pathlib import Path

import pytest

from energon_lite import (
    CaptioningSample,
    ConfigError,
    DecodeFileStore,
    FileStoreDecoder,
    ImageSample,
    JoinedWebdatasetFactory,
    SampleDecoder,
    StandardWebdatasetFactory,
    SystemFileStore,
    TextSample,
    WorkerConfig,
    get_loader,
    get_val_dataset,
    prepare_dataset,
    prepare_metadataset,
)
from energon_lite.synth.shards import write_captioning_shards

WC = WorkerConfig(rank=0, world_size=1, num_workers=0)


def join_pair(text: TextSample, image: ImageSample) -> CaptioningSample:
    return CaptioningSample.derive_from(text, image=image.image, caption=text.text)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same 30 keys twice: texts in shards of 10, images in shards of 7."""
    root = tmp_path_factory.mktemp("joined")
    for name, per_shard, sample_type, field_map in (
        ("texts", 10, "TextSample", {"text": "txt"}),
        ("images", 7, "ImageSample", {"image": "jpg"}),
    ):
        write_captioning_shards(root / name, 30, per_shard, image_size=(8, 8))
        prepare_dataset(
            root / name,
            split_ratio=[("train", 1)],
            sample_type=sample_type,
            field_map=field_map,
            progress=False,
        )
    join = f"""__module__: megatron.energon
__class__: MetadatasetV2
splits:
  train:
    join:
      text: {{path: texts}}
      image: {{path: images}}
    joiner: {{__module__: {__name__}, __function__: join_pair}}
"""
    (root / "join.yaml").write_text(join)
    prepare_metadataset(root / "join.yaml")
    return root


def _factory(root: Path, name: str) -> StandardWebdatasetFactory:
    return StandardWebdatasetFactory(root / name, training=False, worker_config=WC)


def test_joined_factory_gives_the_samples_of_a_join_entry(pair: Path) -> None:
    factory = JoinedWebdatasetFactory(
        {"text": _factory(pair, "texts"), "image": _factory(pair, "images")},
        training=False,
        worker_config=WC,
        join_index=pair / "text_image.sqlite",
        joiner=join_pair,
    )
    assert len(factory) == 30 and factory.paths == [pair / "texts", pair / "images"]
    ours = list(get_loader(factory.build()))
    assert all(isinstance(s, CaptioningSample) and s.image.shape == (3, 8, 8) for s in ours)
    assert sorted(s.__key__ for s in ours) == [f"{i:06d}" for i in range(30)]
    entry = get_val_dataset(
        pair / "join.yaml", split_part="train", worker_config=WC, batch_size=None
    )
    theirs = list(get_loader(entry))
    assert [(s.__key__, s.caption) for s in ours] == [(s.__key__, s.caption) for s in theirs]
    assert all((a.image == b.image).all() for a, b in zip(ours, theirs))


def test_joined_factory_refuses_what_it_cannot_import(pair: Path) -> None:
    inner = [_factory(pair, "texts"), _factory(pair, "images")]
    with pytest.raises(ConfigError, match="top level of a module"):
        JoinedWebdatasetFactory(
            inner, training=True, worker_config=WC, join_index=pair / "j", joiner=lambda *s: s[0]
        )
    with pytest.raises(ConfigError, match="nonmatch='drop'"):
        JoinedWebdatasetFactory(
            inner, training=True, worker_config=WC, join_index=pair / "j", joiner=join_pair,
            nonmatch="drop",
        )  # fmt: skip
    with pytest.raises(ConfigError, match="subset"):
        JoinedWebdatasetFactory(
            inner, training=True, worker_config=WC, join_index=pair / "j", joiner=join_pair,
            subset=(0, 10),
        )  # fmt: skip


class Shout(FileStoreDecoder):
    def decode(self, fname: str, data: bytes) -> str:
        return data.decode().upper() if fname.endswith(".txt") else data.decode()


def test_file_store_decoder_subclass_decodes_through_decode_file_store(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello")
    (tmp_path / "b.md").write_text("as is")
    store = DecodeFileStore(SystemFileStore(tmp_path), decoder=Shout())
    assert store["a.txt"][0] == "HELLO" and store.get("b.md") == "as is"
    assert isinstance(SampleDecoder(), FileStoreDecoder)
    with pytest.raises(TypeError):
        FileStoreDecoder()  # type: ignore[abstract]
