"""``JsonlSource``: the samples of a prepared JSONL file (or ``path label`` meta list).

The Source shape the Reader needs: run arrays ``run_shard/run_start/run_end`` (one shard,
the file, cut into up to ``VIRTUAL_RUNS`` equal runs so that several workers share one file
even without ``max_samples_per_sequence``), ``read``/``read_range``, ``fingerprint()``,
``shard_names``, ``__len__``. A sample is one line: key ``str(line index)`` (Energon's key),
parts ``{"json": bytes}`` for JSONL (decoded to a dict like any ``.json`` part) or
``{"path": str, "label": int | str | None}`` for a text list.

Memory: opening reads two small files (the ``.idx.json`` and the index's last entry): a
10M-line file opens in milliseconds. Reading takes the offsets of a chunk with one
``pread`` of the index and the lines with one ``pread`` of the file, so a worker holds no
per-line object and maps nothing: its private memory stays flat in the line count.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from energon_lite.cache.file_store import FileStore, SystemFileStore
from energon_lite.epathlib import EPath
from energon_lite.errors import DatasetFormatError
from energon_lite.flavors.jsonl.index import (
    read_info,
    sampled_digest,
    sidecar,
    whole_digest,
)
from energon_lite.flavors.jsonl.layout import IDX_SUFFIX
from energon_lite.samples.types import SourceInfo
from energon_lite.shards.dataset import _resolve_bound
from energon_lite.storage import RemotePath, ShardFile, StoragePath, as_path, ops

VIRTUAL_RUNS = 64
CRUDE_CONFIG = {"__module__": "megatron.energon", "__class__": "CrudeWebdataset"}


class JsonlSource:
    """Lines of one prepared line file as crude samples; every split name sees the whole file."""

    def __init__(
        self,
        root: str | os.PathLike[str] | RemotePath,
        split_part: str = "train",
        *,
        split_config: str = "split.yaml",
        dataset_config: str = "dataset.yaml",
        subset: tuple[int | str, int | str] | None = None,
    ) -> None:
        del split_config, dataset_config  # a line file has no .nv-meta
        self.root: StoragePath = as_path(root)  # a local file, or s3:// / msc:// / http(s)://
        self.split_part = split_part
        self.config: dict[str, Any] = dict(CRUDE_CONFIG)
        info = read_info(self.root)
        self.format: str = info["format"]
        media = info.get("media_root")
        self.media_root = None if media is None else (self.root.parent / media).resolve()
        self.shard_names = [self.root.name]
        self._pid = os.getpid()
        self._files_open: tuple[ShardFile, ShardFile] | None = None
        self.count, self.size = self._check_index()
        self._check_content(info)
        runs = max(1, min(VIRTUAL_RUNS, self.count))
        bounds = np.linspace(0, self.count, runs + 1).round().astype(np.int64)
        self.run_start, self.run_end = bounds[:-1], bounds[1:]
        self.run_shard = np.zeros(runs, dtype=np.int64)
        if subset is not None:
            self._apply_subset(subset)
        lengths = self.run_end - self.run_start
        self.run_offset = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

    def _check_content(self, info: dict[str, Any]) -> None:
        """The mtime-then-hash rule (``index.py``): the recorded mtime trusts a local file
        without a read; another mtime checks the whole-content hash; a remote file, or an
        index without them, the sampled windows."""
        mtime, whole = info.get("mtime_ns"), info.get("blake2b")
        if isinstance(self.root, Path) and isinstance(mtime, int) and isinstance(whole, str):
            if self.root.stat().st_mtime_ns == mtime:
                return
            if whole_digest(self.root) == whole:
                return
            what = "different bytes, a new modification time"
        else:
            recorded = info.get("sampled_blake2b")
            if recorded is None or self._digest() == recorded:
                return
            what = "different bytes"
        raise DatasetFormatError(
            f"{self.root}: content changed since it was prepared (same size, {self.size} bytes, "
            f"{what}); re-run `energon-lite prepare {self.root}`"
        )

    def _digest(self) -> str:
        if isinstance(self.root, Path):
            return sampled_digest(self.root, self.size)
        lines = self._files()[0]
        return sampled_digest(str(self.root), self.size, lines.pread)

    def _check_index(self) -> tuple[int, int]:
        idx = sidecar(self.root, IDX_SUFFIX)
        for path in (self.root, idx):
            if not path.is_file():
                raise DatasetFormatError(
                    f"{path}: not found; run `energon-lite prepare {self.root}`"
                )
        lines, index = self._files()
        size, nbytes = lines.size, index.size
        if nbytes % 8 or nbytes < 16:
            raise DatasetFormatError(f"{idx}: {nbytes} bytes is not a line index; re-run prepare")
        last = int(np.frombuffer(index.pread(8, nbytes - 8), dtype="<u8")[0])
        if last != size:
            raise DatasetFormatError(
                f"{idx}: indexes {last} bytes but {self.root} has {size}: the file changed "
                "since it was prepared; re-run `energon-lite prepare`"
            )
        return nbytes // 8 - 1, size

    def _apply_subset(self, subset: tuple[int | str, int | str]) -> None:
        start, end = (_resolve_bound(b, self.count, self.root) for b in subset)
        if not 0 <= start <= end <= self.count:
            raise DatasetFormatError(
                f"{self.root}: subset {list(subset)} -> [{start}, {end}) is outside [0, {self.count})"
            )
        new_start = np.clip(self.run_start, start, end)
        new_end = np.clip(self.run_end, start, end)
        keep = new_end > new_start
        self.run_shard = self.run_shard[keep]
        self.run_start, self.run_end = new_start[keep], new_end[keep]

    # structure ------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self.run_offset[-1])

    @property
    def num_runs(self) -> int:
        return len(self.run_shard)

    def fingerprint(self) -> str:
        digest = hashlib.blake2b(digest_size=8)
        digest.update(f"{self.root.name}:{self.format}:{self.count}:{self.size}".encode())
        for array in (self.run_start, self.run_end):
            digest.update(array.tobytes())
        return digest.hexdigest()

    # I/O ------------------------------------------------------------------------------

    def _files(self) -> tuple[ShardFile, ShardFile]:
        """The line file and its index, opened per process (never share them after fork)."""
        if self._files_open is None or os.getpid() != self._pid:
            self._pid = os.getpid()
            self._files_open = (
                ShardFile(self.root, _version(self.root)),
                ShardFile(sidecar(self.root, IDX_SUFFIX), _version(sidecar(self.root, IDX_SUFFIX))),
            )
        return self._files_open

    def offsets(self, start: int, end: int) -> np.ndarray:
        """Byte offsets of lines ``[start, end]`` (``end - start + 1`` entries)."""
        if not 0 <= start < end <= self.count:
            raise IndexError(f"{self.root}: lines [{start}, {end}) outside [0, {self.count})")
        raw = self._files()[1].pread(8 * (end - start + 1), 8 * start)
        return np.frombuffer(raw, dtype="<u8").astype(np.int64)

    def read(self, shard_id: int, index: int) -> tuple[str, dict[str, Any]]:
        return self.read_range(shard_id, index, index + 1)[0]

    def read_range(self, shard_id: int, start: int, end: int) -> list[tuple[str, dict[str, Any]]]:
        """Keys and parts of lines ``[start, end)`` (two ``pread`` calls)."""
        if shard_id != 0:
            raise IndexError(f"{self.root}: a line file has one shard, not {shard_id}")
        bounds = self.offsets(start, end).tolist()
        base = max(0, bounds[0] - 1)  # and the newline before the first line
        buf = self._files()[0].pread(bounds[-1] - base, base)
        if len(buf) != bounds[-1] - base:
            raise DatasetFormatError(f"{self.root}: file is shorter than its index says")
        out = []
        for i in range(end - start):
            line = buf[bounds[i] - base : bounds[i + 1] - base]
            before = buf[bounds[i] - base - 1] if bounds[i] else 10
            if before != 10 or (line[-1:] != b"\n" and bounds[i + 1] != self.size):
                raise DatasetFormatError(
                    f"{self.root}: the line of sample {start + i} no longer sits where its index says "
                    f"(byte {bounds[i]}): the file changed since it was prepared; re-run "
                    f"`energon-lite prepare {self.root}`"
                )
            out.append((str(start + i), self._parts(line)))
        return out

    def _parts(self, line: bytes) -> dict[str, Any]:
        if self.format == "jsonl":
            return {"json": line}
        return parse_text_line(line)

    def as_file_store(self) -> JsonlFileStore:
        """This file read by name, ``"<line>.json"`` (Energon's ``as_file_store``)."""
        return JsonlFileStore(self.root)

    @property
    def aux_stores(self) -> dict[str, Any]:
        """A meta list prepared with ``--media-root DIR`` gives its cookers aux ``media``."""
        if self.media_root is None:
            return {}
        return {"media": SystemFileStore(self.media_root)}

    def close(self) -> None:
        if self._files_open is not None and os.getpid() == self._pid:
            for file in self._files_open:
                file.close()
        self._files_open = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_files_open"] = None
        return state


def _version(path: StoragePath) -> str:
    """A remote line file's version (ETag), so that every read sees the same object."""
    return ops.version(path)  # "" for a local file


def parse_text_line(line: bytes) -> dict[str, Any]:
    """``b"images/a b.jpg 3\\n"`` -> ``{"path": "images/a b.jpg", "label": 3}`` (the last
    whitespace-separated token is the label: an int when it is one, else a string)."""
    fields = line.decode("utf-8").strip().rsplit(None, 1)
    if len(fields) == 1:
        return {"path": fields[0], "label": None}
    path, label = fields
    try:
        return {"path": path, "label": int(label)}
    except ValueError:
        return {"path": path, "label": label}


class JsonlFileStore(FileStore):
    """Lines of a prepared JSONL file: ``"<line>.json"`` (or the bare line number)."""

    def __init__(self, path: str | os.PathLike[str] | RemotePath) -> None:
        self.path = as_path(path).resolve()
        self._source: Any = None

    def __getitem__(self, name: str) -> tuple[bytes, SourceInfo]:
        if self._source is None:
            self._source = JsonlSource(self.path)
        try:
            line = int(name.removesuffix(".json"))
        except ValueError:
            raise DatasetFormatError(f"{self.path}: {name!r} is no '<line>.json' name") from None
        _, parts = self._source.read(0, line)
        return parts["json"], SourceInfo(
            dataset_path=EPath(self.path),
            index=line,
            shard_name=self.path.name,
            file_names=(f"{line}.json",),
        )

    def get_path(self) -> str:
        return str(self.path)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_source": None}
