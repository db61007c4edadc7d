"""``VideoTextSource``: the sample source of a prepared video-text CSV.

It is a :class:`~energon_lite.shards.dataset.PreparedDataset` whose "shards" are the splits
of the table (one pseudo-shard each), so the Reader, subsets, metadatasets and resume treat
it like any prepared dataset. Only reading differs: a sample is one row, built from the
memory-mapped arrays into a small dict part ``row`` (path, text, shape, fps, extra columns)
- never the media bytes. Media files are opened later, when the sample is encoded.

Memory: the arrays are ``np.load(mmap_mode="r")``; a worker touches only the pages of the
rows it reads, and all workers share them through the page cache.

A table in object storage: the arrays are mapped from the node's index cache (each fetched
once per object version, ``layout.meta_file``), and a row's media paths are URLs under the
table's media folder (an absolute path or a URL in the CSV stays as it is), which the sample
reads through the storage layer (``sample.open_media``).
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from energon_lite.errors import DatasetFormatError
from energon_lite.flavors.video_text.layout import load_marker, meta_file, resolve_prepared
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.shards.meta import DatasetInfo
from energon_lite.storage import RemotePath
from energon_lite.storage.path import url_joiner

# Columns whose values are file paths, resolved like ``path`` (relative to the CSV).
PATH_SUFFIX = "_path"


class VideoTextSource(PreparedDataset):
    """Rows of one split of a prepared CSV as raw samples ``(key, {"row": {...}})``."""

    def __init__(
        self,
        root: str | os.PathLike[str] | RemotePath,
        split_part: str,
        *,
        split_config: str = "split.yaml",
        dataset_config: str = "dataset.yaml",
        subset: tuple[int | str, int | str] | None = None,
    ) -> None:
        folder = resolve_prepared(root)
        super().__init__(
            folder,
            split_part,
            split_config=split_config,
            dataset_config=dataset_config,
            subset=subset,
        )
        info = load_marker(folder)
        self.info = info
        self.media_base = (folder / info["media_base"]).resolve()
        # os.path.join, not pathlib, per row: pathlib interns every path part it parses,
        # which grows without bound over a table of unique paths.
        self._base = str(self.media_base)
        self._join = url_joiner(self.media_base)
        self.stem = Path(info["csv"]).stem
        self._rows_files = {s["shard"]: s["rows"] for s in info["splits"].values()}
        self._arrays: dict[str, np.ndarray] | None = None

    # arrays are opened lazily so that pickling to worker processes sends only paths
    def _array(self, name: str) -> np.ndarray:
        if self._arrays is None:
            root = self.root
            arrays = {
                name: np.load(meta_file(root, f"{name}.npy"), mmap_mode="r")
                for name in ("num_frames", "height", "width", "fps", "offsets")
            }
            arrays["strings"] = np.memmap(meta_file(root, "strings.bin"), dtype=np.uint8, mode="r") if (
                arrays["offsets"][-1] > 0
            ) else np.zeros(0, dtype=np.uint8)  # fmt: skip
            for shard, file in self._rows_files.items():
                if file is not None:
                    arrays[shard] = np.load(meta_file(root, file), mmap_mode="r")
            self._arrays = arrays
        return self._arrays[name]

    def row_of(self, shard_id: int, index: int) -> int:
        """The CSV data row (0-based) of sample ``index`` of a pseudo-shard."""
        shard = self.shard_names[shard_id]
        if self._rows_files.get(shard) is None:
            return index
        return int(self._array(shard)[index])

    def read(self, shard_id: int, index: int) -> tuple[str, dict[str, Any]]:
        return self.read_range(shard_id, index, index + 1)[0]

    def read_range(self, shard_id: int, start: int, end: int) -> list[tuple[str, dict[str, Any]]]:
        count = int(self._counts[shard_id])
        if not 0 <= start < end <= count:
            raise IndexError(
                f"{self.shard_names[shard_id]}: rows [{start}, {end}) outside [0, {count})"
            )
        return [self._row(self.row_of(shard_id, i)) for i in range(start, end)]

    def _row(self, row: int) -> tuple[str, dict[str, Any]]:
        offsets, strings = self._array("offsets"), self._array("strings")
        bounds = offsets[3 * row : 3 * row + 4].tolist()
        path, text, extra = (
            bytes(strings[a:b]).decode("utf-8") for a, b in itertools.pairwise(bounds)
        )
        extras = json.loads(extra) if extra else {}
        for name, value in extras.items():
            if name.endswith(PATH_SUFFIX) and value:
                extras[name] = self._join(self._base, value)
        fps = float(self._array("fps")[row])
        fields = {
            "path": self._join(self._base, path),  # an absolute path stays as it is
            "text": text,
            "num_frames": int(self._array("num_frames")[row]),
            "height": int(self._array("height")[row]),
            "width": int(self._array("width")[row]),
            "fps": None if fps != fps else fps,  # NaN: no fps column or an empty cell
            "extra": extras,
        }
        return f"{self.stem}:{row}", {"row": fields}

    def _check_shards(self, info: DatasetInfo, names: list[str]) -> None:
        """The pseudo-shards are no files: nothing to stat, record or pin."""
        self._record = None
        self._content_digest = None
        self._checked = set()
        self._digest_checked = False

    def prefetch_enabled(self) -> bool:
        return False  # the pseudo-shards are no objects; media are fetched when decoded

    def _content_identity(self, used: list[str]) -> str:
        return str(self.info["csv_fingerprint"]["blake2b"])  # the pseudo-shards are no files

    def _indices_of_keys(self, shard_id: int, keys: set[str]) -> set[int]:
        raise DatasetFormatError(
            f"{self.root}: excluding single rows is not supported for a video-text CSV; "
            "remove the rows from the CSV and prepare it again"
        )

    def close(self) -> None:
        self._arrays = None

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_arrays"] = None
        return state
