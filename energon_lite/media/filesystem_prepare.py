"""``prepare_filesystem_dataset`` (Energon's ``megatron.energon.media.filesystem_prepare``):
record the metadata of every media file of a plain folder, so that a cooker's
``store.get_media_metadata(name)`` answers without reading the file. Files under
``.nv-meta/`` are skipped; the folder's files are read one after another."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tqdm import tqdm

from energon_lite.errors import ConfigError
from energon_lite.media.extractor import MediaFilterConfig
from energon_lite.media_records.table import META_FOLDER, write_media_table


def prepare_filesystem_dataset(
    root_path: str | os.PathLike[str] | Any,
    media_filter: MediaFilterConfig,
    *,
    progress: bool,
    workers: int = 16,
    index_sqlite_tmp_path: Path | None = None,
) -> int:
    """Write the media metadata index of the folder ``root_path`` (a path or a local
    ``EPath``); returns the number of entries. ``workers`` and ``index_sqlite_tmp_path`` are
    accepted for Energon's signature (the folder is read in this process, the index written
    in place). Raises ``ValueError`` when the filter finds no media file, as Energon does."""
    is_local = getattr(root_path, "is_local", None)
    if is_local is not None and not is_local():
        raise ConfigError(
            f"prepare_filesystem_dataset: {root_path} is remote; media metadata of a "
            "folder is prepared from local disk (copy the folder, or prepare it where it lies)"
        )
    root = Path(os.fspath(root_path))
    if not root.is_dir():
        raise ConfigError(f"prepare_filesystem_dataset: {root} is not a folder")
    consider_all = media_filter.should_consider_all()
    files = sorted(
        path
        for path in root.rglob("*")
        if path.is_file()
        and META_FOLDER not in path.relative_to(root).parts
        and (consider_all or media_filter.should_consider_media(path.name))
    )
    if not files:
        raise ValueError(f"{root}: no media files found to process ({media_filter})")
    entries = []
    for path in tqdm(files, desc="media metadata", unit="file", disable=not progress):
        meta = media_filter.extract_metadata(path)
        if meta is not None:
            entries.append((path.relative_to(root).as_posix(), meta))
    return write_media_table(root, entries)
