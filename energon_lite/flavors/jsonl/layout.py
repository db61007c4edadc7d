"""How a line file is recognised and where its index lives (no heavy imports: the kind
registry asks :func:`is_line_file` of every path a loop opens)."""

from __future__ import annotations

import os
from pathlib import Path

IDX_SUFFIX = ".idx"
INFO_SUFFIX = ".idx.json"
LINE_SUFFIXES = (".jsonl", ".ndjson", ".txt", ".lst", ".list", ".meta")


def index_path(path: str | os.PathLike[str]) -> Path:
    return Path(str(path) + IDX_SUFFIX)


def is_line_file(path: Path) -> bool:
    """A file named like a JSONL or meta list, or any file prepared as a line index."""
    path = Path(path)
    if not path.is_file() or path.suffix in (".yaml", ".yml", ".csv", ".tar"):
        return False
    return path.suffix in LINE_SUFFIXES or index_path(path).is_file()
