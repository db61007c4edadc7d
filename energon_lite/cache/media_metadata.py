"""Media metadata (``energon-lite prepare-media``): image size/format and audio/video streams
of every media file of a folder or a prepared tar dataset, recorded once, so that cookers
can ask ``store.get_media_metadata(name)`` without reading the file.

Stored as Energon stores it (``energon_lite.media_records.table``: table ``media_metadata`` in
``.nv-meta/index.sqlite``). Which files are media is a ``MediaFilterConfig``
(``energon_lite.media.extractor``; by extension unless told otherwise).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tqdm import tqdm

from energon_lite.errors import DatasetFormatError
from energon_lite.media.extractor import MediaFilterConfig, MediaFilterStrategy
from energon_lite.media_records.table import DB_NAME, lookup_media
from energon_lite.media_records.table import write_media_table as _write
from energon_lite.storage import RemotePath, StoragePath, as_path, is_remote, local_only, ops

__all__ = ["DB_NAME", "lookup", "prepare_media"]


def lookup(root: StoragePath, key: str) -> Any:
    """The recorded metadata of ``key`` in the dataset or folder at ``root``: an
    ``ImageMetadata`` or ``AVMetadata`` (``energon_lite.media``). A remote table is fetched
    once per version into the index cache (``ENERGON_LITE_CACHE_DIR``) and read there."""
    if is_remote(root):
        remote = root / ".nv-meta" / DB_NAME
        if not ops.is_file(remote):
            raise DatasetFormatError(f"{root}: no media metadata; run `energon-lite prepare-media {root}`")  # fmt: skip
        return lookup_media(root, key, db=ops.local_copy(remote))
    return lookup_media(local_only(root, "media metadata"), key)


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
    if is_remote(root):  # every object below the prefix, one GET each when it is read
        for name in ops.list_files(root, "", skip=".nv-meta"):
            yield name, root / name
        return
    root = local_only(root, "media metadata of a folder")
    for path in sorted(root.rglob("*")):
        if path.is_file() and ".nv-meta" not in path.relative_to(root).parts:
            yield path.relative_to(root).as_posix(), path


def prepare_media(
    root: str | os.PathLike[str] | RemotePath,
    *,
    progress: bool = True,
    media_filter: MediaFilterConfig | None = None,
) -> int:
    """Record the metadata of every media file under ``root`` (by extension unless
    ``media_filter`` says otherwise); returns how many. ``root`` is a local folder or
    prepared dataset, or either on remote storage (``msc://``, ``s3://``, ``az://``, ``gs://``)."""
    root = as_path(root)
    if not root.is_dir():
        raise DatasetFormatError(f"{root}: not a folder or prepared dataset")
    media_filter = media_filter or MediaFilterConfig(strategy=MediaFilterStrategy.EXTENSION)
    consider_all = media_filter.should_consider_all()
    entries = []
    for key, data in tqdm(_entries(root), desc="media metadata", unit="file", disable=not progress):
        if not consider_all and not media_filter.should_consider_media(key):
            continue
        raw = data if isinstance(data, bytes) else ops.read_range_all(data)
        try:
            found = media_filter.extract_metadata(raw, filename=key)
        except Exception as exc:
            raise DatasetFormatError(f"{root}: {key}: cannot read media metadata: {exc}") from exc
        if found is not None:
            entries.append((key, found))
    if is_remote(root):  # the table is written locally, then put as one object
        with tempfile.TemporaryDirectory() as scratch:
            local, remote = Path(scratch), root / ".nv-meta" / DB_NAME
            (local / ".nv-meta").mkdir()
            if remote.is_file():
                (local / ".nv-meta" / DB_NAME).write_bytes(ops.read_bytes(remote))
            count = _write(local, entries)
            ops.write_atomic(remote, (local / ".nv-meta" / DB_NAME).read_bytes())
        return count
    return _write(root, entries)
