"""Parquet folders, including the Hugging Face Hub layout, read in place with pyarrow.

Which files make a split (paths relative to the folder, ``.nv-meta`` left out):

* ``<split>-00000-of-00004.parquet`` or ``<split>-00000.parquet`` (the Hub's
  ``data/train-00000-of-00004.parquet``): the name says the split;
* ``<split>.parquet``, or a folder named like a split (``default/train/0000.parquet``) with
  a known split name (train, test, validation, valid, val, dev);
* any other file belongs to ``train``.

A folder holding several configs (``<config>/...``, anything but ``data/``) is read one
config at a time: give ``<folder>/<config>`` as the path, or ``<config>/<split>`` as split.

Counts and row-group sizes come from each file's footer (one ranged read per file on
object storage), so opening reads no data. A row is found by row group + offset; a read
reads the row groups it touches into Arrow tables (kept in the format's LRU) and converts
only its rows to Python values (``columns.py``); a Hugging Face ``Image`` or ``Audio`` column
(``{bytes, path}`` structs, named in the schema's ``huggingface`` metadata) becomes the
file's bytes, decoded by content; a ``path`` without bytes is read relative to the Parquet
file.
"""

from __future__ import annotations

import bisect
import functools
import json
import re
from typing import Any

from energon_lite.errors import DatasetFormatError
from energon_lite.flavors.tables.columns import MEDIA_FEATURES, table_rows
from energon_lite.flavors.tables.format import TableFormat, pick_split, require
from energon_lite.shards.meta import META_DIR
from energon_lite.storage import StoragePath, open_binary, ops

SPLIT_NAMES = ("train", "test", "validation", "valid", "val", "dev")
_SHARD_NAME = re.compile(r"^(?P<split>[\w.]+?)-\d{5}(-of-\d{5})?$")


def split_of(relative: str) -> tuple[str, str]:
    """``(config, split)`` of a Parquet file from its path relative to the folder."""
    parts = relative.split("/")
    stem = parts[-1].removesuffix(".parquet")
    config = parts[0] if len(parts) > 1 and parts[0] != "data" else ""
    if config in SPLIT_NAMES:
        config = ""
    match = _SHARD_NAME.match(stem)
    if match:
        return config, match.group("split")
    if stem in SPLIT_NAMES:
        return config, stem
    for part in parts[1:-1] if config else parts[:-1]:
        if part in SPLIT_NAMES:
            return config, part
    return config, "train"


def parquet_files(root: StoragePath) -> list[str]:
    return [f for f in ops.list_files(root, ".parquet") if not f.startswith(META_DIR + "/")]


def splits(root: StoragePath) -> dict[str, list[str]]:
    """Split name (``config/split`` where the folder holds several configs) -> its files."""
    found: dict[tuple[str, str], list[str]] = {}
    for name in parquet_files(root):
        found.setdefault(split_of(name), []).append(name)
    configs = {config for config, _ in found}
    if len(configs) <= 1:
        return {split: files for (_, split), files in found.items()}
    return {f"{config}/{split}" if config else split: f for (config, split), f in found.items()}


def media_columns(schema: Any) -> dict[str, str]:
    """Columns the Hugging Face features call ``Image``/``Audio`` -> the feature's name."""
    raw = (schema.metadata or {}).get(b"huggingface")
    if not raw:
        return {}
    try:
        features = json.loads(raw).get("info", {}).get("features", {})
    except (ValueError, AttributeError):
        return {}
    return {
        name: spec["_type"]
        for name, spec in (features.items() if isinstance(features, dict) else ())
        if isinstance(spec, dict) and spec.get("_type") in MEDIA_FEATURES
    }


def column_types(schema: Any, media: dict[str, str]) -> dict[str, str]:
    """The decoder's ``types``: media and binary columns by content, the rest as read."""
    pa = require("pyarrow", "parquet", "a Parquet dataset")
    types = {}
    for field in schema:
        binary = pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type)
        types[field.name] = "auto" if field.name in media or binary else ""
    return types


class ParquetFormat(TableFormat):
    """The Parquet files of one split: counts and row groups from their footers."""

    name = "parquet"

    def __init__(self, root: StoragePath, split_part: str) -> None:
        super().__init__(root, split_part)
        pq = require("pyarrow.parquet", "parquet", f"Parquet dataset {root}")
        if root.is_file():  # one file: every split name reads it, as a JSONL file
            self.root, files = root.parent, [root.name]
        else:
            files = pick_split(root, splits(root), split_part)
        self.shard_names = files
        self.row_groups: list[list[int]] = []  # per shard: first row of each row group, + end
        schema = None
        for shard_id, _name in enumerate(files):
            path = self.shard_path(shard_id)
            try:
                with open_binary(path) as handle:
                    meta = pq.ParquetFile(handle).metadata
            except OSError as exc:
                raise DatasetFormatError(f"{path}: not a readable Parquet file: {exc}") from None
            starts = [0]
            for group in range(meta.num_row_groups):
                starts.append(starts[-1] + meta.row_group(group).num_rows)
            self.row_groups.append(starts)
            self.counts.append(meta.num_rows)
            self.sizes.append(ops.size(path))
            file_schema = meta.schema.to_arrow_schema()
            if schema is None:
                schema = file_schema
            elif not file_schema.equals(schema, check_metadata=False):
                raise DatasetFormatError(
                    f"{path}: its columns {file_schema.names} differ from those of "
                    f"{self.shard_path(0)} ({schema.names}); a split's files share one schema"
                )
        self.media = media_columns(schema) if schema is not None else {}
        self.types = column_types(schema, self.media) if schema is not None else {}

    def read_rows(self, shard_id: int, start: int, end: int) -> list[dict[str, Any]]:
        starts = self.row_groups[shard_id]
        path = self.shard_path(shard_id)
        rows: list[dict[str, Any]] = []
        group = _group_of(starts, start)
        while len(rows) < end - start:
            table = self.block(
                (shard_id, group), functools.partial(self._read_group, shard_id, group)
            )
            first = start + len(rows) - starts[group]
            last = min(end, starts[group + 1]) - starts[group]
            rows.extend(table_rows(table, first, last, self.media, path, starts[group]))
            group += 1
        return rows

    def _read_group(self, shard_id: int, group: int) -> Any:
        """Row group ``group`` of a shard as an Arrow table (rows become Python values as
        they are read, ``columns.py``)."""
        pq = require("pyarrow.parquet", "parquet", "a Parquet dataset")
        path = self.shard_path(shard_id)
        file = self.opened(shard_id, lambda: pq.ParquetFile(open_binary(path)))
        return file.read_row_group(group, use_threads=False)


def _group_of(starts: list[int], row: int) -> int:
    """The row group holding ``row`` (``starts``: first rows, then the end)."""
    return bisect.bisect_right(starts, row) - 1


FORMAT = ParquetFormat
