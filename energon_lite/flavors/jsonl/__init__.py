"""JSONL datasets and ``path label`` meta lists: a line index and a crude-sample Source.

``energon-lite prepare data.jsonl`` (or ``meta.txt --media-root DIR``) writes the index;
the file is then a dataset path of its own or a leaf of a metadataset, and its samples are
cooked by the TaskEncoder's cookers (``docs/crude_data.md``).
"""

from __future__ import annotations

import os

from energon_lite.flavors.jsonl.index import LineIndexInfo, prepare_lines
from energon_lite.flavors.jsonl.source import (
    JsonlFileStore,
    JsonlSource,
    is_line_file,
    parse_text_line,
)


class CrudeJsonlDatasetFactory(JsonlSource):
    """Energon's name for a JSONL dataset; ``prepare_dataset(path)`` writes its index."""

    @staticmethod
    def prepare_dataset(path: str | os.PathLike[str]) -> int:
        """Index ``path`` (Energon's call); returns the number of samples."""
        return prepare_lines(path, fmt="jsonl", progress=False).count


class DefaultCrudeJsonlDatasetFactory(CrudeJsonlDatasetFactory):
    """Energon's default JSONL factory: samples carry ``json`` (a dict) and the subflavors."""


__all__ = [
    "CrudeJsonlDatasetFactory",
    "DefaultCrudeJsonlDatasetFactory",
    "JsonlFileStore",
    "JsonlSource",
    "LineIndexInfo",
    "is_line_file",
    "parse_text_line",
    "prepare_lines",
]
