"""Folders written by Hugging Face ``datasets``' ``save_to_disk``, read in place.

A ``Dataset`` folder holds ``state.json`` (its ``_data_files``: Arrow IPC *stream* files,
``data-00000-of-00001.arrow``) and ``dataset_info.json`` (the features); a ``DatasetDict``
folder holds ``dataset_dict.json`` (``{"splits": [...]}``) and one such folder per split.
A single ``Dataset`` folder is read under any split name (as a JSONL file is).

A stream file has no footer: it is memory-mapped and its record batches are opened without
copying (what ``datasets`` itself does), so counting rows touches only the batch headers and
a read touches only the pages of its rows. Local folders only. Columns come out as the
Parquet reader gives them (``Image``/``Audio`` structs as their bytes, from the features).
"""

from __future__ import annotations

import json
from typing import Any

from energon_lite.errors import DatasetFormatError
from energon_lite.flavors.tables.columns import MEDIA_FEATURES, table_rows
from energon_lite.flavors.tables.format import TableFormat, require
from energon_lite.flavors.tables.parquet import column_types
from energon_lite.storage import StoragePath, local_only

STATE = "state.json"
DICT = "dataset_dict.json"


def _json(path: StoragePath) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DatasetFormatError(f"{path}: not readable as JSON: {exc}") from None


def split_folder(root: StoragePath, split_part: str) -> StoragePath:
    """The ``Dataset`` folder of ``split_part`` (the folder itself, or its split folder)."""
    if (root / STATE).is_file():
        return root
    names = _json(root / DICT).get("splits", [])
    if split_part not in names:
        raise DatasetFormatError(f"{root / DICT}: no split {split_part!r}; it has {names}")
    return root / split_part


class ArrowFormat(TableFormat):
    """The Arrow stream files of one ``save_to_disk`` split, memory-mapped."""

    name = "arrow"

    def __init__(self, root: StoragePath, split_part: str) -> None:
        super().__init__(root, split_part)
        require("pyarrow", "parquet", f"Arrow dataset {root}")
        folder = split_folder(root, split_part)
        prefix = "" if folder == root else f"{split_part}/"
        files = _json(folder / STATE).get("_data_files", [])
        self.shard_names = [prefix + entry["filename"] for entry in files]
        features = _json(folder / "dataset_info.json").get("features", {}) or {}
        self.media = {
            name: spec["_type"]
            for name, spec in features.items()
            if isinstance(spec, dict) and spec.get("_type") in MEDIA_FEATURES
        }
        schema = None
        for shard_id in range(len(self.shard_names)):
            table = self._table(shard_id)
            schema = schema or table.schema
            self.counts.append(table.num_rows)
            self.sizes.append(
                local_only(self.shard_path(shard_id), "an Arrow dataset").stat().st_size
            )
        self.types = column_types(schema, self.media) if schema is not None else {}

    def _table(self, shard_id: int) -> Any:
        pa = require("pyarrow", "parquet", "an Arrow dataset")
        path = local_only(self.shard_path(shard_id), "an Arrow (save_to_disk) dataset")

        def load() -> Any:
            try:
                return pa.ipc.open_stream(pa.memory_map(str(path))).read_all()
            except (OSError, pa.ArrowInvalid) as exc:
                raise DatasetFormatError(f"{path}: not an Arrow stream file: {exc}") from None

        return self.opened(shard_id, load)

    def read_rows(self, shard_id: int, start: int, end: int) -> list[dict[str, Any]]:
        table = self._table(shard_id)
        return table_rows(table, start, end, self.media, self.shard_path(shard_id))


FORMAT = ArrowFormat
