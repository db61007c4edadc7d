"""Energon's names for a JSONL dataset (``CrudeJsonlDatasetFactory`` and its default)."""

from __future__ import annotations

import os

from energon_lite.flavors.jsonl.index import prepare_lines
from energon_lite.flavors.jsonl.source import JsonlSource


class CrudeJsonlDatasetFactory(JsonlSource):
    """Energon's name for a JSONL dataset; ``prepare_dataset(path)`` writes its index."""

    @staticmethod
    def prepare_dataset(path: str | os.PathLike[str]) -> int:
        """Index ``path`` (Energon's call); returns the number of samples."""
        return prepare_lines(path, fmt="jsonl", progress=False).count


class DefaultCrudeJsonlDatasetFactory(CrudeJsonlDatasetFactory):
    """Energon's default JSONL factory: samples carry ``json`` (a dict) and the subflavors."""
