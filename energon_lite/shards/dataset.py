"""``PreparedDataset``: one split of a prepared WebDataset folder, opened without per-sample objects.

The split is a few numpy arrays of *runs*: ``(shard_id, start, end)`` sample ranges of the
shards listed for the split, with excluded shards and samples cut out and an optional subset
applied. Sample offsets stay in the memory-mapped ``.tar.idx`` files, opened per shard on
first use. Opening a 10M-sample dataset therefore costs a few arrays of the size of the shard
list, and every worker shares the index pages through the page cache.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import zlib
from collections import Counter, OrderedDict
from typing import Any

import numpy as np

from energon_lite.errors import DatasetFormatError, short_repr
from energon_lite.samples.crude import CrudeSample
from energon_lite.shards.meta import DatasetInfo, SplitConfig
from energon_lite.shards.metadata import dataset_metadata
from energon_lite.shards.shard_record import (
    check_digest,
    check_local_shard,
    check_probe,
    content_identity,
)
from energon_lite.shards.tar_index import open_index
from energon_lite.storage import RemotePath, ShardFile, StoragePath, as_path, is_remote, ops
from energon_lite.storage.prefetch import prefetch as prefetch_shards
from energon_lite.storage.prefetch import process_cache

_MAX_OPEN_FILES = 32
_MAX_OPEN_INDEXES = 256


WHOLE_BLOCK = 8 << 20  # bytes per read when a whole shard is checked


class PreparedDataset:
    """Random and sequential access to the samples of one split of a prepared dataset."""

    def __init__(
        self,
        root: str | os.PathLike[str] | RemotePath,
        split_part: str,
        *,
        split_config: str = "split.yaml",
        dataset_config: str = "dataset.yaml",
        subset: tuple[int | str, int | str] | None = None,
    ) -> None:
        self.root = as_path(root)
        self.split_part = split_part
        self._pid = os.getpid()
        self._files: OrderedDict[int, ShardFile] = OrderedDict()
        self._indexes: dict[int, np.ndarray] = {}
        self._fingerprint: str | None = None
        self._versions: dict[str, str] = {}
        # read once per process, and again when the folder was prepared anew since
        meta = dataset_metadata(self.root)
        info = meta.info()
        self.config: dict[str, Any] = meta.dataset_config(dataset_config)
        # a dataset.yaml may name its split file; as in Energon it wins over the argument
        split = meta.split(self.config.get("split_config") or split_config)
        if split_part not in split.split_parts:
            raise DatasetFormatError(
                f"{split.source}: no split {short_repr(split_part)}; it has "
                f"{short_repr(sorted(split.split_parts))}"
            )
        self.shard_names = info.shard_names
        self._counts = np.asarray(info.shard_counts, dtype=np.int64)
        # each shard's first sample's index in the dataset (a sample's SourceInfo index)
        self.shard_offsets = np.concatenate([[0], np.cumsum(self._counts)[:-1]]).astype(np.int64)
        shard_id = {name: i for i, name in enumerate(self.shard_names)}
        excluded_shards = {e for e in split.exclude if e in shard_id}
        excluded_samples: dict[str, set[str]] = {}
        for entry in split.exclude:
            if entry not in shard_id:
                shard, _, key = entry.partition(".tar/")
                if not key or shard + ".tar" not in shard_id:
                    raise DatasetFormatError(
                        f"{split.source}: exclude entry {short_repr(entry)} names no shard of .info.json"
                    )
                excluded_samples.setdefault(shard + ".tar", set()).add(key)

        listed = split.split_parts[split_part]
        if len(set(listed)) != len(listed):
            twice = sorted(name for name, n in Counter(listed).items() if n > 1)[:20]
            raise DatasetFormatError(
                f"{split.source}: split {split_part!r} lists {twice} more than once; their "
                "samples would be delivered twice: list each shard once"
            )
        self._check_shards(info, listed)
        runs = None if split.exclude else _whole_shards(listed, shard_id, self._counts)
        if runs is None:
            runs = self._runs(split, listed, shard_id, excluded_shards, excluded_samples)
        self.run_shard, self.run_start, self.run_end = runs
        if subset is not None:
            self._apply_subset(subset)
        lengths = self.run_end - self.run_start
        self.run_offset = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

    def _runs(
        self,
        split: SplitConfig,
        listed: list[str],
        shard_id: dict[str, int],
        excluded_shards: set[str],
        excluded_samples: dict[str, set[str]],
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The split's runs with excluded shards and samples cut out; names an unknown shard."""
        shards, starts, ends = [], [], []
        for name in listed:
            if name not in shard_id:
                raise DatasetFormatError(
                    f"{split.source}: split {short_repr(self.split_part)} lists shard "
                    f"{short_repr(name)}, which .nv-meta/.info.json does not know; re-run prepare"
                )
            if name in excluded_shards:
                continue
            sid, count = shard_id[name], int(self._counts[shard_id[name]])
            dropped = excluded_samples.get(name)
            cuts = sorted(self._indices_of_keys(sid, dropped)) if dropped else []
            start = 0
            for cut in [*cuts, count]:
                if cut > start:
                    shards.append(sid)
                    starts.append(start)
                    ends.append(cut)
                start = cut + 1
        as_array = np.asarray
        return as_array(shards, np.int64), as_array(starts, np.int64), as_array(ends, np.int64)

    # structure ------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self.run_offset[-1])

    @property
    def num_runs(self) -> int:
        return len(self.run_shard)

    def split_shards(self) -> list[tuple[str, int]]:
        """The split's shards in order, each with its sample count (Energon's shard list)."""
        seen: dict[int, None] = dict.fromkeys(int(sid) for sid in self.run_shard)
        return [(self.shard_names[sid], int(self._counts[sid])) for sid in seen]

    def locate(self, position: int) -> tuple[int, int]:
        """``(shard_id, index in shard)`` of the split's ``position``-th sample."""
        if not 0 <= position < len(self):
            raise IndexError(f"sample position {position} outside [0, {len(self)})")
        run = int(np.searchsorted(self.run_offset, position, side="right")) - 1
        return int(self.run_shard[run]), int(self.run_start[run] + position - self.run_offset[run])

    def _check_shards(self, info: DatasetInfo, names: list[str]) -> None:
        """Load the shard record (datasets prepared without one skip the checks). A local
        shard is checked against it when a process first reads it (``_verify``): opening a
        split stats no shard. A remote one is checked by size here, from the folder listing,
        and probed when a process first reads it (two ranged GETs)."""
        meta = dataset_metadata(self.root, check=False)  # checked by __init__ just now
        record = self._record = meta.record()
        self._content_digest = None if record is None else record.content_digest
        self._checked: set[int] = set()
        self._digest_checked = False
        # a remote shard's ETag / Last-Modified, pinned once per process and dataset: every
        # read is conditional on it ({} locally: a local shard is checked when first read)
        self._versions = meta.shard_versions(names)

    def _verify(self, shard_id: int, file: ShardFile) -> None:
        """The shard against the record, once per process: a missing or changed one is
        refused, naming it (locally one ``stat``; remotely the probe's two ranged GETs)."""
        record = self._record
        if record is None or shard_id in self._checked:
            return
        if is_remote(self.root):
            name = self.shard_names[shard_id]
            check_probe(self.root, name, record.probe(shard_id), record.where, file)
        elif check_local_shard(self.root, record, shard_id) and not self._digest_checked:
            counts = dict(zip(self.shard_names, self._counts.tolist()))
            check_digest(self.root, record, counts, self.shard_names[shard_id])
            self._digest_checked = True
        self._checked.add(shard_id)  # a check that could not be read is tried again

    def check_whole_shard(self, shard_id: int) -> None:
        """Read the whole shard and compare its CRC-32 with the one prepare recorded
        (``lint``); DatasetFormatError naming it when they differ. Nothing to compare for a
        record written before the CRC-32s."""
        expected = self._record.crc32(shard_id) if self._record is not None else None
        if expected is None:
            return
        file, crc, at = self._fd(shard_id), 0, 0
        while at < file.size:
            block = file.pread(min(WHOLE_BLOCK, file.size - at), at)
            if not block:
                break
            crc, at = zlib.crc32(block, crc), at + len(block)
        if at != file.size or crc != expected:
            raise DatasetFormatError(
                f"{self.root / self.shard_names[shard_id]}: shard changed since prepare: the "
                f"CRC-32 of its {at} bytes is {crc:08x}, prepare read {expected:08x} (an edit "
                "that kept its size and mtime); re-run prepare"
            )

    def fingerprint(self) -> str:
        """Changes when the shard list, counts, the split's runs or the shards' content change.

        Content: the digest prepare recorded over every ``.tar.idx`` (kept honest by the
        size/mtime check at open), or for datasets without a record the shard sizes and both
        ends of each index. Computed once per dataset object, without reading shard data.
        """
        if self._fingerprint is None:
            digest = hashlib.blake2b(digest_size=8)
            digest.update("\n".join(self.shard_names).encode("utf-8", "surrogateescape"))
            for array in (self._counts, self.run_shard, self.run_start, self.run_end):
                digest.update(array.tobytes())
            used = [self.shard_names[i] for i in np.unique(self.run_shard)]
            digest.update(self._content_identity(used).encode())
            self._fingerprint = digest.hexdigest()
        return self._fingerprint

    def _content_identity(self, used: list[str]) -> str:
        if self._content_digest is not None:
            return self._content_digest
        return content_identity(self.root, used)

    def _apply_subset(self, subset: tuple[int | str, int | str]) -> None:
        """Keep samples ``[start, end)`` of the split; bounds are ints, ``"N%"`` or ``"end"``."""
        self.run_shard, self.run_start, self.run_end = subset_runs(
            self.root, self.run_shard, self.run_start, self.run_end, subset
        )

    # I/O ------------------------------------------------------------------------------

    def _fd(self, shard_id: int) -> ShardFile:
        if os.getpid() != self._pid:  # forked: never share file offsets or maps with the parent
            self._files.clear()
            self._indexes.clear()
            self._pid = os.getpid()
        fd = self._files.get(shard_id)
        if fd is None:
            if len(self._files) >= _MAX_OPEN_FILES:
                self._files.popitem(last=False)[1].close()
            name = self.shard_names[shard_id]
            crc32 = self._record.crc32(shard_id) if self._record is not None else None
            fd = ShardFile(self.root / name, self._versions.get(name, ""), crc32)  # missing: named
            self._files[shard_id] = fd
        else:
            self._files.move_to_end(shard_id)
        return fd

    def prefetch_enabled(self) -> bool:
        """Whether :meth:`prefetch` does anything: a remote dataset with a shard cache on."""
        return is_remote(self.root) and process_cache() is not None

    def prefetch(self, shard_ids: list[int]) -> None:
        """The shards this worker reads next, in order: fetched into the node's shard cache
        ahead of use (bounded in bytes; ``energon_lite.storage.prefetch``)."""
        root = self.root
        if not is_remote(root) or process_cache() is None:
            return
        items = []
        for shard_id in shard_ids:
            if shard_id in self._files and os.getpid() == self._pid:
                continue  # open already
            name = self.shard_names[shard_id]
            path = root / name
            crc32 = self._record.crc32(shard_id) if self._record is not None else None
            items.append((path, self._versions.get(name, ""), ops.size(path), crc32))
        prefetch_shards(items)

    def index(self, shard_id: int) -> np.ndarray:
        """The memory-mapped sample offsets of a shard (``count + 1`` entries)."""
        offsets = self._indexes.get(shard_id)
        if offsets is None:
            if len(self._indexes) >= _MAX_OPEN_INDEXES:  # keep a worker's maps bounded
                self._indexes.pop(next(iter(self._indexes)))
            path = self.root / self.shard_names[shard_id]
            offsets = open_index(path, int(self._counts[shard_id]))
            self._indexes[shard_id] = offsets
        return offsets

    def read(self, shard_id: int, index: int) -> tuple[str, dict[str, bytes]]:
        """Key and parts of one sample (one ``pread``)."""
        return self.read_range(shard_id, index, index + 1)[0]

    def read_range(self, shard_id: int, start: int, end: int) -> list[tuple[str, dict[str, bytes]]]:
        """Keys and parts of samples ``[start, end)`` of a shard, read with one ``pread``."""
        fd = self._fd(shard_id)
        self._verify(shard_id, fd)  # first: a changed shard is named as such
        offsets = self.index(shard_id)
        if not 0 <= start < end <= len(offsets) - 1:
            raise IndexError(
                f"{self.shard_names[shard_id]}: samples [{start}, {end}) outside "
                f"[0, {len(offsets) - 1})"
            )
        bounds = offsets[start : end + 1].astype(np.int64).tolist()
        base = bounds[0]
        where = str(self.root / self.shard_names[shard_id])
        if any(b <= a for a, b in itertools.pairwise(bounds)) or bounds[-1] > fd.size:
            raise DatasetFormatError(
                f"{where}.idx: offsets of samples [{start}, {end}) are not increasing inside "
                f"the shard's {fd.size} bytes: the index is corrupt; re-run prepare"
            )
        # a RemoteStorageError (the retries are spent) propagates: the store failed, not
        # these samples, and skipping them would lose them silently (docs/safety.md)
        buf = fd.pread(bounds[-1] - base, base)
        if len(buf) != bounds[-1] - base:
            raise DatasetFormatError(f"{where}: file is shorter than its .tar.idx says")
        view = memoryview(buf)
        from energon_lite.shards.tar import parse_sample  # the reader's (in the workers)

        return [
            parse_sample(view[a - base : b - base], a, where) for a, b in itertools.pairwise(bounds)
        ]

    def _indices_of_keys(self, shard_id: int, keys: set[str]) -> set[int]:
        """Indices of the given sample keys in a shard (reads one header per sample)."""
        from energon_lite.shards.tar import first_member_name, split_name

        fd = self._fd(shard_id)
        self._verify(shard_id, fd)
        offsets = self.index(shard_id)
        where = str(self.root / self.shard_names[shard_id])
        found: dict[str, int] = {}
        for i in range(len(offsets) - 1):
            split = split_name(first_member_name(fd, int(offsets[i]), where))
            if split is not None and split[0] in keys:
                found[split[0]] = i
        missing = keys - set(found)
        if missing:
            raise DatasetFormatError(
                f"{where}: excluded sample keys {sorted(missing)} are not in this shard"
            )
        return set(found.values())

    def close(self) -> None:
        for shard in self._files.values():
            shard.close()
        self._files.clear()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_files"] = OrderedDict()
        state["_indexes"] = {}
        return state


def _whole_shards(
    listed: list[str], shard_id: dict[str, int], counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The runs of a split without exclusions: each non-empty shard whole, in one pass
    (``None`` when a name is unknown: the loop names it)."""
    try:
        ids = np.fromiter((shard_id[name] for name in listed), dtype=np.int64, count=len(listed))
    except KeyError:
        return None
    ids = ids[counts[ids] > 0]
    return ids, np.zeros(len(ids), dtype=np.int64), counts[ids]


def subset_runs(
    root: StoragePath,
    run_shard: np.ndarray,
    run_start: np.ndarray,
    run_end: np.ndarray,
    subset: tuple[int | str, int | str],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The runs cut to samples ``[start, end)`` of the whole split (bounds are ints, ``"N%"``
    or ``"end"``); a range outside the split is a DatasetFormatError naming ``root``."""
    lengths = run_end - run_start
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    total = int(offsets[-1])
    start, end = (_resolve_bound(b, total, root) for b in subset)
    if not 0 <= start <= end <= total:
        raise DatasetFormatError(
            f"{root}: subset range {short_repr(list(subset))} -> [{start}, {end}) is outside "
            f"the split's [0, {total}) samples"
        )
    new_start = np.clip(start - offsets[:-1], 0, lengths) + run_start
    new_end = np.clip(end - offsets[:-1], 0, lengths) + run_start
    keep = new_end > new_start
    return run_shard[keep], new_start[keep], new_end[keep]


def _resolve_bound(bound: int | str, total: int, root: StoragePath) -> int:
    if isinstance(bound, int) and not isinstance(bound, bool):
        return bound
    text = str(bound).strip()
    if text == "end":
        return total
    if text.endswith("%"):
        try:
            return round(float(text[:-1]) * total / 100)
        except ValueError:
            pass
    raise DatasetFormatError(
        f"{root}: subset bound {short_repr(bound)}: use an integer, 'N%' or 'end'"
    )


class CrudeWebdataset(PreparedDataset):
    """A prepared tar dataset whose ``dataset.yaml`` says ``__class__: CrudeWebdataset``: the
    same split as ``PreparedDataset``, its samples crude dicts (Energon's name)."""

    __sample_type__ = CrudeSample
