"""Where a prepared video-text index lives and how it is recognised (no heavy imports).

A CSV ``videos.csv`` is prepared into ``videos.energon/`` next to it (or ``--output``); the
folder's ``.nv-meta/video_text.json`` marks it. The pipeline and the loader call
:func:`is_video_text` and :func:`resolve_prepared` to route such paths here.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from energon_lite.errors import DatasetFormatError
from energon_lite.shards.meta import META_DIR

MARKER = "video_text.json"
VERSION = 1
REQUIRED = ("path", "text", "num_frames", "height", "width")
_EDGE = 1 << 16  # bytes hashed at each end of the CSV for the quick staleness check


def default_output(csv_path: Path) -> Path:
    return csv_path.parent / f"{csv_path.stem}.energon"


def shard_name(csv_name: str, split: str) -> str:
    """The pseudo-shard of one split: what logs print as the sample's shard."""
    return f"{csv_name}:{split}"


def is_video_text(path: str | os.PathLike[str]) -> bool:
    """A ``.csv`` file, or a folder prepared from one."""
    path = Path(path)
    return path.suffix == ".csv" or (path / META_DIR / MARKER).is_file()


def quick_fingerprint(csv_path: Path) -> dict[str, Any]:
    """Size and a hash of the first and last 64 KiB: survives a copy, catches an edit."""
    size = csv_path.stat().st_size
    digest = hashlib.blake2b(digest_size=8)
    with open(csv_path, "rb") as file:
        digest.update(file.read(_EDGE))
        file.seek(max(0, size - _EDGE))
        digest.update(file.read(_EDGE))
    return {"size": size, "edges": digest.hexdigest()}


def load_marker(folder: Path) -> dict[str, Any]:
    path = folder / META_DIR / MARKER
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
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


def resolve_prepared(path: str | os.PathLike[str]) -> Path:
    """The prepared folder of a CSV (checked to be up to date) or of a prepared folder."""
    path = Path(path)
    if path.suffix != ".csv":
        load_marker(path)
        return path
    folder = default_output(path.resolve())
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
