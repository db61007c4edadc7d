"""Where a prepared video-text index lives and how it is recognised (no heavy imports).

A CSV ``videos.csv`` is prepared into ``videos.energon/`` next to it (or ``--output``); the
folder's ``.nv-meta/video_text.json`` marks it. The pipeline and the loader call
:func:`is_video_text` and :func:`resolve_prepared` to route such paths here.

Both may be in object storage (``s3://``, ``az://``, ``gs://``, ``msc://``, ``http(s)://``):
the index files are then read through the storage layer (``meta_file``: the arrays from the
node's index cache, fetched once per version) and a CSV's staleness check reads its edges
with two ranged GETs.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, overload

from energon_lite.errors import DatasetFormatError
from energon_lite.shards.meta import META_DIR
from energon_lite.storage import RemotePath, StoragePath, as_path, ops

MARKER = "video_text.json"
VERSION = 1
REQUIRED = ("path", "text", "num_frames", "height", "width")
_EDGE = 1 << 16  # bytes hashed at each end of the CSV for the quick staleness check


def default_output(csv_path: Path) -> Path:
    return csv_path.parent / f"{csv_path.stem}.energon"


def shard_name(csv_name: str, split: str) -> str:
    """The pseudo-shard of one split: what logs print as the sample's shard."""
    return f"{csv_name}:{split}"


def is_video_text(path: str | os.PathLike[str] | RemotePath) -> bool:
    """A ``.csv`` file, or a folder prepared from one (local or remote)."""
    where = as_path(path)
    return where.suffix == ".csv" or (where / META_DIR / MARKER).is_file()


def quick_fingerprint(csv_path: StoragePath) -> dict[str, Any]:
    """Size and a hash of the first and last 64 KiB: survives a copy, catches an edit."""
    digest = hashlib.blake2b(digest_size=8)
    size = ops.size(csv_path)
    digest.update(ops.read_span(csv_path, 0, _EDGE))
    digest.update(ops.read_span(csv_path, max(0, size - _EDGE), size))
    return {"size": size, "edges": digest.hexdigest()}


def meta_file(folder: StoragePath, name: str) -> Path:
    """A local file with the bytes of ``folder/.nv-meta/name``: the file itself, or (remote)
    its copy in the node's index cache, keyed by the object's version."""
    return ops.local_copy(folder / META_DIR / name)


def load_marker(folder: StoragePath) -> dict[str, Any]:
    path = folder / META_DIR / MARKER
    try:
        info = json.loads(ops.read_text(path))
    except (FileNotFoundError, DatasetFormatError):
        if path.is_file():
            raise
        raise DatasetFormatError(
            f"{folder} is not a prepared video-text dataset (no {META_DIR}/{MARKER}); "
            "run `energon-lite prepare <table>.csv`"
        ) from None
    if info.get("version") != VERSION:
        raise DatasetFormatError(
            f"{path}: index version {info.get('version')!r}, this energon_lite reads "
            f"{VERSION}; re-run `energon-lite prepare` on the CSV"
        )
    return info


@overload
def resolve_prepared(path: Path) -> Path: ...


@overload
def resolve_prepared(path: str | os.PathLike[str] | RemotePath) -> StoragePath: ...


def resolve_prepared(path: str | os.PathLike[str] | RemotePath) -> StoragePath:
    """The prepared folder of a CSV (checked to be up to date) or of a prepared folder."""
    path = as_path(path)
    if path.suffix != ".csv":
        load_marker(path)
        return path
    folder: StoragePath = (
        default_output(path.resolve())
        if isinstance(path, Path)
        else path.parent / f"{path.stem}.energon"
    )
    if not (folder / META_DIR / MARKER).is_file():
        raise DatasetFormatError(
            f"{path} is not prepared (no {folder}); run `energon-lite prepare {path}` once"
        )
    info = load_marker(folder)
    recorded = info["csv_fingerprint"]
    current = quick_fingerprint(path)
    if (recorded["size"], recorded["edges"]) != (current["size"], current["edges"]):
        raise DatasetFormatError(
            f"{path} changed since it was prepared into {folder} (size {recorded['size']} -> "
            f"{current['size']} bytes); re-run `energon-lite prepare {path}`"
        )
    return folder
