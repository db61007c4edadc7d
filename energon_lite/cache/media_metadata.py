"""Media metadata (``energon-lite prepare-media``): image size/format and audio/video streams
of every media file of a folder or a prepared tar dataset, recorded once, so that cookers
can ask ``store.get_media_metadata(name)`` without reading the file.

Stored as Energon stores it: table ``media_metadata(entry_key TEXT PRIMARY KEY,
metadata_type TEXT, metadata_json TEXT)`` in ``.nv-meta/index.sqlite`` (``entry_key`` is the
file's path in the folder, or ``"<sample key>.<part>"`` in a tar dataset; ``metadata_type``
is ``"image"`` or ``"av"``). A dataset Energon prepared with ``--media-metadata-by-...``
reads here, and the reverse. Media are recognised by extension. The table is written into a
copy of the database that replaces the original by rename (other tables are kept).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from energon_lite.errors import DatasetFormatError
from energon_lite.storage import RemotePath, StoragePath, as_path, local_only, ops

DB_NAME = "index.sqlite"
IMAGE_EXTS = frozenset({"jpg", "jpeg", "png", "webp", "bmp", "tif", "tiff", "gif", "ppm"})
AV_EXTS = frozenset({"mp4", "avi", "mov", "mkv", "webm", "m4v", "flac", "mp3", "wav", "ogg", "m4a"})


@dataclass
class ImageMetadata:
    """An image file's size, PIL format and mode (Energon's ``ImageMetadata``)."""

    width: int
    height: int
    format: str
    mode: str


def extract(name: str, data: bytes) -> tuple[str, dict[str, Any]] | None:
    """``(metadata_type, fields)`` of a media file, or None when the extension is no media."""
    ext = name.rsplit(".", 1)[-1].lower()
    if ext in IMAGE_EXTS:
        from PIL import Image

        with Image.open(io.BytesIO(data)) as image:  # reads the header only
            meta = ImageMetadata(image.width, image.height, str(image.format), image.mode)
        return "image", asdict(meta)
    if ext in AV_EXTS:
        from energon_lite.av import AVDecoder

        with AVDecoder(data) as decoder:
            fields = asdict(decoder.get_metadata())
        return "av", {k: v for k, v in fields.items() if v is not None}
    return None


def load(metadata_type: str, payload: str) -> Any:
    """An ``ImageMetadata`` or ``energon_lite.av.AVMetadata`` from a stored row."""
    fields = json.loads(payload)
    if metadata_type == "image":
        return ImageMetadata(**fields)
    if metadata_type == "av":
        from energon_lite.av import AVMetadata

        known = set(AVMetadata.__dataclass_fields__)
        return AVMetadata(**{k: v for k, v in fields.items() if k in known})
    raise DatasetFormatError(f"unknown media metadata type {metadata_type!r}")


def lookup(root: Path, key: str) -> Any:
    """The recorded metadata of ``key`` in the dataset or folder at ``root``."""
    db = root / ".nv-meta" / DB_NAME
    if not db.is_file():
        raise DatasetFormatError(
            f"{root}: no media metadata; run `energon-lite prepare-media {root}`"
        )
    with sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True) as conn:
        try:
            row = conn.execute(
                "SELECT metadata_type, metadata_json FROM media_metadata WHERE entry_key = ?",
                (key,),
            ).fetchone()
        except sqlite3.OperationalError:
            raise DatasetFormatError(
                f"{db}: no media_metadata table; run `energon-lite prepare-media {root}`"
            ) from None
    if row is None:
        raise KeyError(f"{root}: no media metadata for {key!r}")
    return load(row[0], row[1])


def _entries(root: StoragePath) -> Iterator[tuple[str, Any]]:
    """``(entry key, reader of its bytes)`` of every file of a folder or tar dataset (a
    remote one only as a prepared tar dataset)."""
    if (root / ".nv-meta" / ".info.json").is_file() or (root / ".nv-meta" / ".info.yaml").is_file():
        from energon_lite.shards.dataset import PreparedDataset
        from energon_lite.shards.meta import load_info, load_split

        info = load_info(root)
        dataset = PreparedDataset(root, next(iter(load_split(root).split_parts)))
        for shard_id, count in enumerate(info.shard_counts):
            for start in range(0, count, 64):
                for key, parts in dataset.read_range(shard_id, start, min(count, start + 64)):
                    for part, data in parts.items():
                        yield f"{key}.{part}", data
        return
    root = local_only(root, "media metadata of a folder that is not a prepared dataset")
    for path in sorted(root.rglob("*")):
        if path.is_file() and ".nv-meta" not in path.relative_to(root).parts:
            yield path.relative_to(root).as_posix(), path


def prepare_media(root: str | os.PathLike[str] | RemotePath, *, progress: bool = True) -> int:
    """Record the metadata of every media file under ``root`` (a local folder or prepared
    dataset, or a prepared dataset on s3://, msc://); returns how many."""
    root = as_path(root)
    if not root.is_dir():
        raise DatasetFormatError(f"{root}: not a folder or prepared dataset")
    rows = []
    for key, data in tqdm(_entries(root), desc="media metadata", unit="file", disable=not progress):
        ext = key.rsplit(".", 1)[-1].lower()
        if ext not in IMAGE_EXTS and ext not in AV_EXTS:
            continue
        raw = data.read_bytes() if isinstance(data, Path) else data
        try:
            found = extract(key, raw)
        except Exception as exc:
            raise DatasetFormatError(f"{root}: {key}: cannot read media metadata: {exc}") from exc
        if found is not None:
            rows.append((key, found[0], json.dumps(found[1])))
    if isinstance(root, RemotePath):  # written locally, then put as one object
        with tempfile.TemporaryDirectory() as scratch:
            local = Path(scratch) / DB_NAME
            remote = root / ".nv-meta" / DB_NAME
            if remote.is_file():
                local.write_bytes(ops.read_bytes(remote))
            _write_rows(local, rows)
            ops.write_atomic(remote, local.read_bytes())
        return len(rows)
    meta = root / ".nv-meta"
    meta.mkdir(exist_ok=True)
    _write_rows(meta / DB_NAME, rows)
    return len(rows)


def _write_rows(target: Path, rows: list[tuple[str, str, str]]) -> None:
    """The media_metadata table of ``target`` replaced by ``rows`` (other tables kept)."""
    tmp = target.with_name(f"{DB_NAME}.{os.getpid()}.tmp")
    if target.is_file():
        shutil.copyfile(target, tmp)
    try:
        with sqlite3.connect(tmp) as conn:
            conn.execute("DROP TABLE IF EXISTS media_metadata")
            conn.execute(
                "CREATE TABLE media_metadata (entry_key TEXT PRIMARY KEY, "
                "metadata_type TEXT NOT NULL, metadata_json TEXT NOT NULL)"
            )
            conn.executemany("INSERT INTO media_metadata VALUES (?, ?, ?)", rows)
        conn.close()
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
