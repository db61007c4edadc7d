"""``TableSource``: one split of a table-format folder (Parquet, Arrow, MDS, LitData) read in place.

A *format* (``parquet.py``, ``arrow.py``, ``mds.py``, ``litdata.py``) lists a split's files
("shards") with their row counts from the format's own metadata (Parquet footers,
``index.json``, Arrow stream headers) and reads rows ``[start, end)`` of a shard as dicts of
column values. This class makes that a :class:`~energon_lite.sources.base.Source`: one run
per shard, keys ``"<shard>/<row>"``, the subset of a metadataset, the dataset.yaml that
``energon-lite prepare`` wrote (typed samples) or a crude config (every column by name),
and a fingerprint from the names, counts and sizes. A restore fetches a row by its
``(shard, row)``: the format turns that into a row group and offset, or a sample index.

Memory: opening holds a few numbers per shard; a worker keeps the last decoded blocks of
each format in a small LRU (``format.py``), dropped when the source is pickled to a worker.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import numpy as np

from energon_lite.flavors.tables.format import TableFormat, open_format
from energon_lite.samples.factory import PART_TYPES
from energon_lite.shards.dataset import subset_runs
from energon_lite.shards.meta import META_DIR, load_dataset_config
from energon_lite.storage import RemotePath, StoragePath, as_path

CRUDE_CONFIG = {"__module__": "megatron.energon", "__class__": "CrudeWebdataset"}


class TableSource:
    """Rows of one split of a Parquet / Arrow / MDS / LitData folder as ``(key, columns)``."""

    def __init__(
        self,
        root: str | os.PathLike[str] | RemotePath,
        split_part: str = "train",
        *,
        format_name: str,
        split_config: str = "split.yaml",
        dataset_config: str = "dataset.yaml",
        subset: tuple[int | str, int | str] | None = None,
    ) -> None:
        del split_config  # splits come from the format's own layout
        self.root: StoragePath = as_path(root)
        self.split_part = split_part
        self.table: TableFormat = open_format(format_name, self.root, split_part)
        prepared = self.root / META_DIR / dataset_config
        config = load_dataset_config(self.root, dataset_config) if prepared.is_file() else {}
        self.config: dict[str, Any] = {**(config or CRUDE_CONFIG), PART_TYPES: self.table.types}
        self.shard_names: list[str] = self.table.shard_names
        counts = np.asarray(self.table.counts, dtype=np.int64)
        keep = np.flatnonzero(counts > 0)
        self.run_shard = keep.astype(np.int64)
        self.run_start = np.zeros(len(keep), dtype=np.int64)
        self.run_end = counts[keep]
        if subset is not None:
            self._apply_subset(subset)

    def _apply_subset(self, subset: tuple[int | str, int | str]) -> None:
        """Keep samples ``[start, end)`` of the split; bounds are ints, ``"N%"`` or ``"end"``."""
        self.run_shard, self.run_start, self.run_end = subset_runs(
            self.root, self.run_shard, self.run_start, self.run_end, subset
        )

    def __len__(self) -> int:
        return int((self.run_end - self.run_start).sum())

    @property
    def num_runs(self) -> int:
        return len(self.run_shard)

    def fingerprint(self) -> str:
        """Names, counts and sizes of the split's files, and the runs: not where they live."""
        digest = hashlib.blake2b(digest_size=8)
        digest.update(f"{self.table.name}:{self.split_part}".encode())
        for name, count, size in zip(self.shard_names, self.table.counts, self.table.sizes):
            digest.update(f"{name}:{count}:{size};".encode())
        for array in (self.run_shard, self.run_start, self.run_end):
            digest.update(array.tobytes())
        return digest.hexdigest()

    def read(self, shard_id: int, index: int) -> tuple[str, dict[str, Any]]:
        return self.read_range(shard_id, index, index + 1)[0]

    def read_range(self, shard_id: int, start: int, end: int) -> list[tuple[str, dict[str, Any]]]:
        """Rows ``[start, end)`` of shard ``shard_id``, keyed ``"<shard>/<row>"``."""
        count = self.table.counts[shard_id]
        if not 0 <= start <= end <= count:
            raise IndexError(
                f"{self.root / self.shard_names[shard_id]}: rows [{start}, {end}) outside "
                f"[0, {count})"
            )
        rows = self.table.read_rows(shard_id, start, end)
        name = self.shard_names[shard_id]
        return [(f"{name}/{start + i}", row) for i, row in enumerate(rows)]

    def close(self) -> None:
        self.table.close()

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__.copy()  # the format drops its open files itself
