"""``EmptyDatasetError`` (Energon's): a split part that names no shard."""

from __future__ import annotations

from energon_lite.errors import DatasetFormatError


class EmptyDatasetError(DatasetFormatError):
    """Raised when a dataset (a split part of it) holds no shards."""
