"""``energon-lite prepare-media``: media metadata of a folder and a tar dataset, read by cookers."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import pytest

from energon_lite import (
    Cooker,
    DefaultTaskEncoder,
    TextSample,
    WorkerConfig,
    basic_sample_keys,
    get_loader,
    get_train_dataset,
    prepare_dataset,
)
from energon_lite.cache import SystemFileStore, WebdatasetFileStore
from energon_lite.cli.main import main as cli
from energon_lite.errors import DatasetFormatError
from energon_lite.media import ImageMetadata
from energon_lite.synth.shards import make_image
from energon_lite.task_encoder.cooking import cooker

pytest.importorskip("av")


def _media(folder: Path) -> dict[str, bytes]:
    from energon_lite.synth.av import make_video

    files = {}
    for name, size, fmt in (("image000.jpg", (32, 16), "JPEG"), ("image001.png", (24, 24), "PNG")):
        buffer = io.BytesIO()
        make_image(1, size).save(buffer, format=fmt)
        files[name] = buffer.getvalue()
    buffer = io.BytesIO()
    make_video(buffer, "mp4", num_frames=15, width=32, height=24, fps=15)
    files["video001.mp4"] = buffer.getvalue()
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    (folder / "notes.txt").write_text("not media")
    return files


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("media")
    files = _media(root / "fs")
    (root / "wds/parts").mkdir(parents=True)
    with tarfile.open(root / "wds/parts/data-0.tar", "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    prepare_dataset(
        root / "wds", split_ratio=[("train", 1)], sample_type="CrudeWebdataset", progress=False
    )
    for folder in ("fs", "wds"):
        assert cli(["prepare-media", str(root / folder), "--media-metadata-by-extension"]) == 0
    (root / "mds.yaml").write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        "    path: wds\n    aux:\n      media: filesystem://fs\n"
    )
    return root


def test_folder_and_tar_metadata(media: Path) -> None:
    folder, tars = SystemFileStore(media / "fs"), WebdatasetFileStore(media / "wds")
    for store in (folder, tars):
        assert store.get_media_metadata("image000.jpg") == ImageMetadata(
            width=32, height=16, format="JPEG", mode="RGB"
        )
        assert store.get_media_metadata("image001.png") == ImageMetadata(
            width=24, height=24, format="PNG", mode="RGB"
        )
        video = store.get_media_metadata("video001.mp4")
        assert (video.video_width, video.video_height, video.video_fps) == (32, 24, 15.0)
        assert video.video_num_frames == 15
        with pytest.raises(KeyError):
            store.get_media_metadata("notes.txt")
    with pytest.raises(DatasetFormatError, match="prepare-media"):
        SystemFileStore(media).get_media_metadata("x.jpg")


def _describe(meta) -> str:
    if isinstance(meta, ImageMetadata):
        return f"IMG-{meta.width}x{meta.height}-{meta.format}"
    return f"VIDEO-{meta.video_width}x{meta.video_height}@{meta.video_fps}fps"


@cooker(need_primary=True)
def cook_metadata(sample: dict, primary, media) -> TextSample:
    name = sample["__sources__"][0].file_names[0]
    own, other = primary.get_media_metadata(name), media.get_media_metadata(name)
    return TextSample(**basic_sample_keys(sample), text=f"{_describe(own)}|{_describe(other)}")


class MetadataEncoder(DefaultTaskEncoder):
    cookers = (Cooker(cook_metadata),)


def test_cooker_reads_primary_and_aux_metadata(media: Path) -> None:
    dataset = get_val_texts(media / "mds.yaml")
    assert sorted(dataset) == [
        "IMG-24x24-PNG|IMG-24x24-PNG",
        "IMG-32x16-JPEG|IMG-32x16-JPEG",
        "VIDEO-32x24@15.0fps|VIDEO-32x24@15.0fps",
    ]


def get_val_texts(path: Path) -> list[str]:
    dataset = get_train_dataset(
        path,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=1,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=MetadataEncoder(),
        repeat=False,
    )
    return [t for batch in get_loader(dataset) for t in batch.text]


def test_energon_reads_our_metadata_and_we_read_theirs(media: Path, tmp_path: Path) -> None:
    energon_fs = pytest.importorskip("megatron.energon.media.filesystem_prepare")
    from megatron.energon.cache import SystemFileStore as EnergonStore
    from megatron.energon.epathlib import EPath
    from megatron.energon.media.extractor import MediaFilterConfig, MediaFilterStrategy

    ours = EnergonStore(media / "fs").get_media_metadata("image000.jpg")
    assert (ours.width, ours.height, ours.format) == (32, 16, "JPEG")
    theirs = tmp_path / "theirs"
    shutil.copytree(media / "fs", theirs, ignore=shutil.ignore_patterns(".nv-meta"))
    energon_fs.prepare_filesystem_dataset(
        EPath(theirs), MediaFilterConfig(strategy=MediaFilterStrategy.EXTENSION), progress=False
    )
    store = SystemFileStore(theirs)
    assert store.get_media_metadata("image001.png") == ImageMetadata(
        width=24, height=24, format="PNG", mode="RGB"
    )
    assert store.get_media_metadata("video001.mp4").video_width == 32


def test_cli_glob_and_header_strategies(tmp_path: Path) -> None:
    files = _media(tmp_path / "fs")
    (tmp_path / "fs" / "image000.bin").write_bytes(files["image000.jpg"])  # a JPEG by content
    assert cli(["prepare-media", str(tmp_path / "fs"), "--media-metadata-by-glob", "*.png"]) == 0
    store = SystemFileStore(tmp_path / "fs")
    assert store.get_media_metadata("image001.png").width == 24
    with pytest.raises(KeyError):
        store.get_media_metadata("image000.jpg")  # not matched by the glob
    assert cli(["prepare-media", str(tmp_path / "fs"), "--media-metadata-by-header"]) == 0
    store = SystemFileStore(tmp_path / "fs")
    assert store.get_media_metadata("image000.bin").format == "JPEG"
    both = ["--media-metadata-by-header", "--media-metadata-by-glob", "*.png"]
    assert cli(["prepare-media", str(tmp_path / "fs"), *both]) == 1
