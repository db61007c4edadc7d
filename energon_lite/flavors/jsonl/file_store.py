"""``JsonlFileStore``: the lines of a prepared JSONL file read by name (``"<line>.json"``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from energon_lite.cache.file_store import FileStore
from energon_lite.errors import DatasetFormatError
from energon_lite.samples.types import SourceInfo


class JsonlFileStore(FileStore):
    """Lines of a prepared JSONL file: ``"<line>.json"`` (or the bare line number)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).resolve()
        self._source: Any = None

    def __getitem__(self, name: str) -> tuple[bytes, SourceInfo]:
        from energon_lite.flavors.jsonl.source import JsonlSource

        if self._source is None:
            self._source = JsonlSource(self.path)
        try:
            line = int(name.removesuffix(".json"))
        except ValueError:
            raise DatasetFormatError(f"{self.path}: {name!r} is no '<line>.json' name") from None
        _, parts = self._source.read(0, line)
        return parts["json"], SourceInfo(
            dataset_path=str(self.path),
            index=line,
            shard_name=self.path.name,
            file_names=(f"{line}.json",),
        )

    def get_path(self) -> str:
        return str(self.path)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_source": None}
