"""Which table format a folder is in (a cheap look: marker files, a glance at ``index.json``),
and the split names each format's layout gives."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from energon_lite.errors import DatasetFormatError
from energon_lite.shards.meta import INFO_JSON, META_DIR
from energon_lite.storage import StoragePath

INDEX_HEAD = 1 << 16  # bytes of an index.json read to tell MDS from LitData


def marker(format_name: str) -> str:
    """The file ``prepare`` writes into ``.nv-meta``: how a remote folder is recognised."""
    return f"{META_DIR}/{format_name}.json"


def _prepared_tar(path: Path) -> bool:
    return (path / META_DIR / INFO_JSON).is_file() or (path / META_DIR / ".info.yaml").is_file()


def _index_kind(index: Path) -> str:
    try:
        with open(index, "rb") as file:
            head = file.read(INDEX_HEAD)
    except OSError:
        return ""
    if b'"column_encodings"' in head or b'"format": "mds"' in head:
        return "mds"
    if b'"chunk_size"' in head or b'"data_format"' in head:
        return "litdata"
    return ""


def _indexes(path: Path) -> list[Path]:
    """``index.json`` of the folder, else those of its subfolders (the splits)."""
    own = path / "index.json"
    if own.is_file():
        return [own]
    return sorted(itertools.islice(path.glob("*/index.json"), 64))


def detect(path: Path, format_name: str) -> bool:
    """Whether ``path`` is a folder (or, for Parquet, a file) of ``format_name``."""
    path = Path(path)
    if format_name == "parquet" and path.suffix == ".parquet":
        return path.is_file()
    if not path.is_dir() or _prepared_tar(path):
        return False
    if (path / marker(format_name)).is_file():
        return True
    if format_name == "arrow":
        return (path / "state.json").is_file() or (path / "dataset_dict.json").is_file()
    if format_name in ("mds", "litdata"):
        found = _indexes(path)
        return bool(found) and _index_kind(found[0]) == format_name
    patterns = ("*.parquet", "*/*.parquet", "*/*/*.parquet")
    return any(next(iter(path.glob(p)), None) is not None for p in patterns)


def split_names(root: StoragePath, format_name: str) -> list[str]:
    """The splits a folder of ``format_name`` holds (as ``prepare`` recorded them, if it ran)."""
    recorded = root / marker(format_name)
    if recorded.is_file():
        try:
            return list(json.loads(recorded.read_text())["splits"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DatasetFormatError(f"{recorded}: {exc}; re-run energon-lite prepare") from None
    if format_name == "parquet":
        from energon_lite.flavors.tables.parquet import splits

        return ["train"] if root.is_file() else sorted(splits(root))
    if format_name == "arrow":
        if (root / "state.json").is_file():
            return ["train"]
        try:
            return list(json.loads((root / "dataset_dict.json").read_text())["splits"])
        except (OSError, ValueError, KeyError) as exc:
            raise DatasetFormatError(f"{root}/dataset_dict.json: {exc}") from None
    if (root / "index.json").is_file():
        return ["train"]
    return sorted(p.parent.name for p in _indexes(Path(str(root))))
