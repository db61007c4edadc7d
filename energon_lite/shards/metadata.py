"""``DatasetMetadata``: a prepared dataset's ``.nv-meta``, read by one object, once per process.

A dataset is opened several times in one process: the metadataset parser checks each
leaf, the pipeline opens its sources, Energon's compat factories open theirs, each split
of a dataset opens the same folder. All of them ask ``dataset_metadata(root)``, which the
storage session holds by root: ``.info.json``, the ``dataset.yaml`` and split files (by
name) and the shard record are read the first time one asks, then served from memory.

Each ask checks that the folder is still what was read, for one listing of ``.nv-meta``
(locally a ``stat`` of its files): a dataset replaced and prepared again in the same process
(new ``.info.json``, record...) is read afresh, with what the process remembered below its
root (listings, shard versions) forgotten. The shards' versions are pinned at each open
from a fresh listing of their folder (a shard replaced in place is read as it is now, or
refused when the record names another version), by this object for all of that open's
users. Over plain HTTP, which cannot list, the
metadata is read again at every ask, as before this object existed.
"""

from __future__ import annotations

import os
from typing import Any

from energon_lite.shards.meta import (
    META_DIR,
    DatasetInfo,
    SplitConfig,
    load_dataset_config,
    load_info,
    load_split,
)
from energon_lite.shards.shard_record import (
    ShardRecord,
    check_remote_shards,
    load_record,
    remote_versions,
)
from energon_lite.storage import StoragePath, as_path, is_remote, ops, session

_UNREAD = object()


class DatasetMetadata:
    """The ``.nv-meta`` of the prepared dataset at ``root``, each file read on first use."""

    def __init__(self, root: StoragePath, token: Any) -> None:
        self.root = root
        self.token = token  # what the folder looked like when read (None: not comparable)
        self._info: DatasetInfo | None = None
        self._configs: dict[str, dict[str, Any]] = {}
        self._splits: dict[str, SplitConfig] = {}
        self._record: Any = _UNREAD
        self._versions: dict[str, str] = {}  # pinned remote shard versions, by name

    def info(self) -> DatasetInfo:
        """``.info.json`` (or the legacy ``.info.yaml``)."""
        if self._info is None:
            self._info = load_info(self.root)
        return self._info

    def dataset_config(self, name: str = "dataset.yaml") -> dict[str, Any]:
        """``.nv-meta/<name>``, checked (``shards.meta.load_dataset_config``)."""
        found = self._configs.get(name)
        if found is None:
            found = self._configs[name] = load_dataset_config(self.root, name)
        return found

    def split(self, name: str = "split.yaml") -> SplitConfig:
        """The split file ``name``, its names bounded by ``.info.json``."""
        found = self._splits.get(name)
        if found is None:
            found = self._splits[name] = load_split(self.root, name, self.info())
        return found

    def record(self) -> ShardRecord | None:
        """The shard record prepare wrote (None for a dataset prepared without one)."""
        if self._record is _UNREAD:
            self._record = load_record(self.root, self.info().shard_names)
        return self._record

    def shard_versions(self, names: list[str]) -> dict[str, str]:
        """The versions to pin for reading the remote shards ``names`` (``{}`` locally). Each
        shard is checked once: missing, or of another size or version than prepare recorded,
        is refused naming it (from the folder listing: no request per shard)."""
        if not is_remote(self.root):
            return {}
        info = self.info()
        shard_id = {name: i for i, name in enumerate(info.shard_names)}
        new = [n for n in dict.fromkeys(names) if n in shard_id and n not in self._versions]
        record = self.record()
        if new and record is not None:
            check_remote_shards(self.root, record, [shard_id[n] for n in new], info.shard_counts)
        self._versions.update(remote_versions(self.root, record, new))
        return {n: self._versions[n] for n in names if n in self._versions}

    def forget_versions(self) -> None:
        """Pin the shards' versions again at the next ``shard_versions`` (a new open)."""
        self._versions = {}


def dataset_metadata(
    root: str | os.PathLike[str] | StoragePath, check: bool = True
) -> DatasetMetadata:
    """The metadata object of the dataset at ``root`` in this process (see the module doc);
    ``check=False``: the one held, unchecked (for the opener that has just checked it)."""
    root = as_path(root)
    held = session().metadata
    # by root and the options it is read with (a RemotePath's equality ignores credentials)
    key = (root, repr(sorted(getattr(root, "storage_options", {}).items())))
    found = held.get(key)
    if found is not None and not check:
        return found
    token = _token(root)
    if found is None or token is None or found.token != token:
        ops.forget_under(root)  # the versions it pins and the files it reads are current
        found = held[key] = DatasetMetadata(root, token)
    else:  # .nv-meta as read; the shards' versions are pinned as they are now
        ops.forget_under(root, keep=root / META_DIR)
        found.forget_versions()
    return found


def _token(root: StoragePath) -> Any:
    """What ``.nv-meta`` holds now, cheaply: (name, version, size) of each of its files."""
    if is_remote(root):
        listed = ops.fresh_listing(root / META_DIR)
        if listed is None:
            return None  # HTTP: no listing
        return tuple(sorted(listed.items()))
    try:
        with os.scandir(root / META_DIR) as entries:
            return tuple(
                sorted(
                    (e.name, e.inode(), s.st_size, s.st_mtime_ns)
                    for e in entries
                    if e.is_file() and (s := e.stat())
                )
            )
    except FileNotFoundError:
        return ()
