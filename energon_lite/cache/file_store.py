"""``FileStore``s: datasets read by file name, for cookers (Energon's names).

``store[name] -> (data, SourceInfo)`` and ``store.get(name, sample)`` (which also appends the
source to ``sample["__sources__"]``). Kinds:

* ``SystemFileStore(base_dir)``: files of a plain folder (``aux: {media: filesystem://imgs}``),
  local or on remote storage (``filesystem+msc://profile/imgs``: one GET per file);
* ``WebdatasetFileStore(root)``: members of a prepared tar dataset, ``"<key>.<part>"``, by
  random access (the key index, then one ``pread`` of the sample); the dataset may be on
  remote storage (``s3://``, ``msc://`` ...), read as its Source reads it (ranged GETs with
  retries, pinned versions, the node-local shard cache);
* any dataset kind whose Source has ``as_file_store()`` (a JSONL file: ``"<line>.json"``);
* ``DecodeFileStore(inner, decoder=...)`` decodes by extension; ``PrimaryFileStore`` lets
  a cooker name a part of its own sample as ``".jpg"``.

All are picklable (files are opened lazily, per process).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Generic, TypeVar

from energon_lite.epathlib import EPath
from energon_lite.errors import DatasetFormatError
from energon_lite.samples.types import SourceInfo
from energon_lite.shards.metadata import dataset_metadata
from energon_lite.storage import RemotePath, StoragePath, as_path, is_remote, is_url
from energon_lite.storage.path import inside

T_sample = TypeVar("T_sample", covariant=True)


def add_source_info(sample: Any, *infos: SourceInfo) -> None:
    """Append ``infos`` to a sample's (or crude dict's) ``__sources__``."""
    if sample is None:
        return
    if isinstance(sample, dict):
        sample["__sources__"] = (*(sample.get("__sources__") or ()), *infos)
    else:
        sample.__sources__ = (*(getattr(sample, "__sources__", None) or ()), *infos)


class FileStore(Generic[T_sample]):
    """A dataset that can be read by file name."""

    def __getitem__(self, name: str) -> tuple[Any, SourceInfo]:
        raise NotImplementedError

    def _get_raw(self, name: str) -> tuple[bytes, SourceInfo]:
        return self[name]

    def _decode_raw(self, data: Any, **kwargs: Any) -> Any:
        return data

    def get(self, name: str, sample: Any = None) -> Any:
        """The data of ``name``; records where it came from in ``sample``'s ``__sources__``."""
        data, source = self[name]
        add_source_info(sample, source)
        return data

    def get_path(self) -> str:
        raise NotImplementedError

    def get_media_metadata(self, name: str) -> Any:
        """The metadata ``energon-lite prepare-media`` recorded for ``name``."""
        raise NotImplementedError(f"{type(self).__name__} records no media metadata")

    def __str__(self) -> str:
        return f"{type(self).__name__}({self.get_path()})"


class SystemFileStore(FileStore):
    """Files of a folder, by path relative to it (paths may not leave it); the folder may be
    a URL (``msc://``, ``s3://`` ...): each file is then read with one GET."""

    def __init__(self, base_dir: str | os.PathLike[str] | RemotePath | None = None) -> None:
        self.base_dir: StoragePath | None = (
            None if base_dir is None else as_path(base_dir).resolve()
        )

    def __getitem__(self, name: str) -> tuple[bytes, SourceInfo]:
        path = Path(name) if self.base_dir is None else inside(self.base_dir, name)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise DatasetFormatError(f"{path}: file not found (asked for {name!r})") from None
        return data, SourceInfo(
            dataset_path=EPath(self.base_dir if self.base_dir is not None else "/"),
            index=name,
            shard_name=str(self.base_dir or ""),
            file_names=(name,),
        )

    def get_path(self) -> str:
        return str(self.base_dir)

    def get_media_metadata(self, name: str) -> Any:
        from energon_lite.cache.media_metadata import lookup

        if self.base_dir is None:
            raise DatasetFormatError("media metadata needs a SystemFileStore with a base_dir")
        return lookup(self.base_dir, name)


class WebdatasetFileStore(FileStore):
    """Parts of the samples of a prepared tar dataset: ``"<sample key>.<part>"``."""

    def __init__(self, dataset_path: str | os.PathLike[str] | RemotePath) -> None:
        self.root = as_path(dataset_path).resolve()
        self._table: Any = None
        self._dataset: Any = None

    def _lookup(self, key: str) -> tuple[int, int, dict[str, bytes]]:
        from energon_lite.cache.key_index import candidates, load_key_index
        from energon_lite.shards.dataset import PreparedDataset

        if self._table is None:
            self._table = load_key_index(self.root)
            split = next(iter(dataset_metadata(self.root).split().split_parts))
            self._dataset = PreparedDataset(self.root, split)
        for shard_id, index in candidates(self._table, key):
            found, parts = self._dataset.read(shard_id, index)
            if found == key:
                return shard_id, index, parts
        raise DatasetFormatError(f"{self.root}: no sample with key {key!r}")

    def __getitem__(self, name: str) -> tuple[bytes, SourceInfo]:
        key, dot, part = name.partition(".")
        if not dot:
            raise DatasetFormatError(f"{self.root}: {name!r} names no part; use '<key>.<part>'")
        shard_id, _, parts = self._lookup(key)
        if part not in parts:
            raise DatasetFormatError(
                f"{self.root}: sample {key!r} has no part {part!r}; it has {sorted(parts)}"
            )
        shard = self._dataset.shard_names[shard_id]
        return parts[part], SourceInfo(
            dataset_path=EPath(self.root), index=name, shard_name=shard, file_names=(name,)
        )

    def get_path(self) -> str:
        return str(self.root)

    def get_media_metadata(self, name: str) -> Any:
        from energon_lite.cache.media_metadata import lookup

        return lookup(self.root, name)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_table": None, "_dataset": None}


class DecodeFileStore(FileStore):
    """Decodes what ``inner`` reads with a ``SampleDecoder`` (by the name's extension)."""

    def __init__(self, inner: FileStore, *, decoder: Any) -> None:
        self._inner, self.decoder = inner, decoder

    def _decode(self, name: str, data: Any) -> Any:
        from energon_lite.decode import SampleDecoder

        if (
            isinstance(self.decoder, SampleDecoder)
            and type(self.decoder).decode is SampleDecoder.decode
        ):
            return self.decoder.decode_part(name, data)
        return self.decoder.decode(name, data)  # Energon's FileStoreDecoder.decode(fname, raw)

    def __getitem__(self, name: str) -> tuple[Any, SourceInfo]:
        data, source = self._inner[name]
        return self._decode(name, data), source

    def _get_raw(self, name: str) -> tuple[bytes, SourceInfo]:
        return self._inner._get_raw(name)

    def _decode_raw(self, data: Any, **kwargs: Any) -> Any:
        return self._decode(kwargs["fname"], self._inner._decode_raw(data, **kwargs))

    def get_path(self) -> str:
        return self._inner.get_path()

    def get_media_metadata(self, name: str) -> Any:
        return self._inner.get_media_metadata(name)


class PrimaryFileStore(FileStore[T_sample], Generic[T_sample]):
    """``inner`` where a name starting with ``.`` means a part of the current sample."""

    def __init__(self, inner: FileStore, current_key: str) -> None:
        self._inner, self._current_key = inner, current_key

    def _name(self, name: str) -> str:
        return f"{self._current_key}{name}" if name.startswith(".") else name

    def __getitem__(self, name: str) -> tuple[Any, SourceInfo]:
        return self._inner[self._name(name)]

    def _get_raw(self, name: str) -> tuple[bytes, SourceInfo]:
        return self._inner._get_raw(self._name(name))

    def _decode_raw(self, data: Any, **kwargs: Any) -> Any:
        return self._inner._decode_raw(data, **kwargs)

    def get_path(self) -> str:
        return self._inner.get_path()

    def get_media_metadata(self, name: str) -> Any:
        return self._inner.get_media_metadata(self._name(name))


def open_file_store(spec: str, base: StoragePath) -> FileStore:
    """An ``aux:`` value: ``filesystem://DIR`` (a plain local folder), a prepared tar dataset
    folder, or a dataset of another kind whose Source has ``as_file_store()`` (a prepared
    ``.jsonl``), local or a URL (``s3://``, ``msc://`` ...); relative paths are relative to
    ``base`` (the metadataset's folder, local or remote)."""
    if spec.startswith("filesystem+") and is_url(spec.removeprefix("filesystem+")):
        spec = "filesystem://" + spec.removeprefix("filesystem+")
    if spec.startswith("filesystem://"):
        rest = spec.removeprefix("filesystem://")
        folder: StoragePath = as_path(rest) if is_url(rest) else (base / rest).resolve()
        if isinstance(folder, Path) and not folder.is_dir():
            raise DatasetFormatError(f"aux {spec!r}: {folder} is not a folder")
        return SystemFileStore(folder)  # a remote folder: its files are checked when read
    if is_url(spec):
        return primary_file_store(as_path(spec))
    if "://" in spec:
        raise DatasetFormatError(
            f"aux {spec!r}: unknown scheme; a local path, filesystem://DIR or a URL of "
            "s3://, msc://, http(s)://"
        )
    return primary_file_store((base / spec).resolve())


def primary_file_store(path: StoragePath, source: Any = None) -> FileStore:
    """A dataset read by file name: its Source's ``as_file_store()`` (a remote JSONL file's
    too), or a tar folder's (local, or on remote storage)."""
    if source is not None and hasattr(source, "as_file_store"):
        return source.as_file_store()
    if source is None and is_remote(path):  # its kind by name: a remote folder is not probed
        from energon_lite.sources.kinds import TAR_FOLDER, kind_of

        kind = kind_of(path)
        if kind is not TAR_FOLDER and kind.open is not None:
            source = kind.open(path, "train")
        elif not any((path / ".nv-meta" / n).exists() for n in (".info.json", ".info.yaml")):
            raise DatasetFormatError(
                f"{path}: not a prepared dataset (no .nv-meta/.info.json) that can be read by "
                "file name; prepare it, or give a prepared .jsonl"
            )
    elif source is None and not (path / ".nv-meta").is_dir():
        from energon_lite.sources.kinds import kind_of

        kind = kind_of(path)
        if kind.open is None or not path.exists():
            raise DatasetFormatError(
                f"{path}: not a dataset that can be read by file name; use a prepared dataset "
                "folder, a prepared .jsonl, or filesystem://DIR for a plain folder"
            )
        source = kind.open(path, "train")
    if source is not None and hasattr(source, "as_file_store"):
        return source.as_file_store()
    return WebdatasetFileStore(path)
