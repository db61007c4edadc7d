"""``energon_lite.media.extractor`` and ``prepare_filesystem_dataset``: which files are media,
their metadata and the folder's index, with megatron-energon as the oracle (its
``megatron.energon.media`` at the same paths)."""

from __future__ import annotations

import io
import sqlite3
from pathlib import Path

import pytest
from conftest import oracle

from energon_lite.media import AVMetadata, ImageMetadata
from energon_lite.media.extractor import MediaFilterConfig, MediaFilterStrategy
from energon_lite.media.filesystem_prepare import prepare_filesystem_dataset
from energon_lite.synth.shards import make_image

pytest.importorskip("av")
energon = oracle()


def _files() -> dict[str, bytes]:
    from energon_lite.synth.av import make_video

    files = {}
    for name, size, fmt in (("a.jpg", (32, 16), "JPEG"), ("b.PNG", (24, 24), "PNG")):
        buffer = io.BytesIO()
        make_image(1, size).save(buffer, format=fmt)
        files[name] = buffer.getvalue()
    files["jpeg_named.bin"] = files["a.jpg"]  # media only by its header
    buffer = io.BytesIO()
    make_video(buffer, "mp4", num_frames=15, width=32, height=24, fps=15)
    files["sub/clip.mp4"] = buffer.getvalue()
    files["notes.txt"] = b"not media"
    files["broken.jpg"] = b"not a jpeg at all"
    return files


FILTERS = [
    ("extension", None, False, True),
    ("header", None, True, False),
    ("glob", "*.jpg,*.bin", False, False),
]


def _theirs(kind: str, glob: str | None, header: bool, extension: bool) -> object:
    from megatron.energon.media.extractor import MediaFilterConfig as TheirConfig

    return TheirConfig.parse(glob, header, extension)


def _plain(meta: object) -> object:
    return None if meta is None else (type(meta).__name__, meta.to_dict())  # type: ignore[attr-defined]


@pytest.mark.parametrize(("kind", "glob", "header", "extension"), FILTERS)
def test_filters_find_and_describe_the_media_energon_finds(
    kind: str, glob: str | None, header: bool, extension: bool, tmp_path: Path
) -> None:
    ours = MediaFilterConfig.parse(glob, header, extension)
    theirs = _theirs(kind, glob, header, extension)
    assert ours.strategy.value == theirs.strategy.value
    assert ours.patterns == theirs.patterns
    assert ours.should_consider_all() == theirs.should_consider_all()
    for name, data in _files().items():
        assert ours.should_consider_media(name) == theirs.should_consider_media(name), name
        got = _plain(ours.extract_metadata(data, filename=name))
        if kind != "glob":  # Energon 7.4 fails an internal assertion on a GLOB match
            assert got == _plain(theirs.extract_metadata(data, filename=name)), (kind, name)
        elif name in ("a.jpg", "jpeg_named.bin"):
            assert got == (
                "ImageMetadata",
                {"width": 32, "height": 16, "format": "JPEG", "mode": "RGB"},
            )
        else:
            assert got is None, name
        path = tmp_path / name.replace("/", "_")
        path.write_bytes(data)
        assert _plain(ours.extract_metadata(path)) == got, (kind, name)
        assert _plain(ours.extract_metadata(io.BytesIO(data), filename=name)) == got


def test_the_metadata_of_each_kind() -> None:
    files = _files()
    by_extension = MediaFilterConfig(strategy=MediaFilterStrategy.EXTENSION)
    assert by_extension.extract_metadata(files["a.jpg"], filename="a.jpg") == ImageMetadata(
        width=32, height=16, format="JPEG", mode="RGB"
    )
    video = by_extension.extract_metadata(files["sub/clip.mp4"], filename="clip.mp4")
    assert isinstance(video, AVMetadata) and (video.video_width, video.video_height) == (32, 24)
    assert by_extension.extract_metadata(files["notes.txt"], filename="notes.txt") is None
    # the header finds the JPEG behind a name that says nothing
    header = MediaFilterConfig(strategy=MediaFilterStrategy.HEADER)
    assert header.extract_metadata(files["jpeg_named.bin"], filename="x.bin") == ImageMetadata(
        width=32, height=16, format="JPEG", mode="RGB"
    )


def test_parse_and_arguments_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="Exactly one"):
        MediaFilterConfig.parse(None, True, True)
    with pytest.raises(ValueError, match="Exactly one"):
        MediaFilterConfig.parse(None, False, False)
    config = MediaFilterConfig.parse("*.jpg", False, False)
    with pytest.raises(ValueError, match="filename"):
        config.extract_metadata(b"...")
    (tmp_path / "a.jpg").write_bytes(b"x")
    with pytest.raises(ValueError, match="filename"):
        config.extract_metadata(tmp_path / "a.jpg", filename="a.jpg")


def _rows(db: Path) -> list[tuple[str, str, str]]:
    conn = sqlite3.connect(db)
    try:
        return sorted(conn.execute("SELECT * FROM media_metadata").fetchall())
    finally:
        conn.close()


def test_prepare_filesystem_dataset_writes_energons_index(tmp_path: Path) -> None:
    from megatron.energon.epathlib import EPath as TheirPath
    from megatron.energon.media.filesystem_prepare import (
        prepare_filesystem_dataset as their_prepare,
    )

    for folder in ("ours", "theirs"):
        for name, data in _files().items():
            (tmp_path / folder / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / folder / name).write_bytes(data)
    config = MediaFilterConfig(strategy=MediaFilterStrategy.EXTENSION)
    count = prepare_filesystem_dataset(tmp_path / "ours", config, progress=False)
    theirs = _theirs("extension", None, False, True)
    their_count = their_prepare(TheirPath(tmp_path / "theirs"), theirs, progress=False, workers=1)
    assert count == their_count == 3  # a.jpg, b.PNG, sub/clip.mp4; broken.jpg is no image
    ours_rows = _rows(tmp_path / "ours/.nv-meta/index.sqlite")
    their_rows = _rows(tmp_path / "theirs/.nv-meta/index.sqlite")
    assert [r[:2] for r in ours_rows] == [r[:2] for r in their_rows]


def test_prepare_filesystem_dataset_refuses_a_folder_without_media(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("no media")
    config = MediaFilterConfig(strategy=MediaFilterStrategy.EXTENSION)
    with pytest.raises(ValueError, match="no media files"):
        prepare_filesystem_dataset(tmp_path, config, progress=False)
