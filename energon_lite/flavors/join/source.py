"""``JoinedSource``: samples of several prepared datasets matched by sample key.

Opened from a join spec file (``energon_lite.metadataset.join``). The primary (first) dataset's
split gives the runs; each partner is matched through a *join index*: an int64 array over
the primary's samples (all shards, in shard order) holding the partner's ``shard << 40 |
index`` or -1, one row per partner. As in Energon, the index is made when the metadataset
is prepared (``prepare_metadataset``, inside
``energon_lite.metadataset.join.preparing_joins``), from the datasets' key indexes (sorted
key hashes, ``energon_lite.cache.key_index``) with vectorised binary search, saved
atomically as ``index/join_index_<digest>.npy`` beside the spec (the digest covers each
dataset's path, split, configs, ``nonmatch`` and content fingerprint) and memory-mapped
afterwards; opening a join whose index is missing (never prepared, or the
join or its datasets changed since) is a ``ConfigError`` that says to prepare again. A
``JoinedWebdatasetFactory`` join (built in code, no metadataset to prepare) makes its index
on first open. A partner's ``nonmatch`` decides what a primary sample without a match does:
``skip`` cuts it out of the runs, ``none`` gives None, ``error`` stops at open with the
count and a first missing key.

A read returns the primary's key and ``{"__join__": [(key, parts, shard name, shard,
index) or None per dataset]}``; the sample factory builds each dataset's sample and calls
the joiner. Reading a partner checks that its key equals the primary's (a hash collision
would be caught here).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from energon_lite.cache.key_index import load_key_index
from energon_lite.errors import ConfigError, DatasetFormatError
from energon_lite.metadataset.join import INDEX_FOLDER, joins_being_prepared
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.shards.metadata import dataset_metadata
from energon_lite.storage import local_only

_SHIFT = 40


class JoinedSource:
    """The joined samples of a join spec, as the Reader's Source."""

    def __init__(
        self,
        spec_path: str | os.PathLike[str],
        split_part: str = "train",
        *,
        split_config: str = "split.yaml",
        dataset_config: str = "dataset.yaml",
        subset: tuple[int | str, int | str] | None = None,
    ) -> None:
        del split_config, dataset_config  # each partner names its own
        self.root = Path(spec_path)
        self.split_part = split_part
        self.spec = json.loads(self.root.read_text(encoding="utf-8"))
        partners = self.spec["partners"]
        self.datasets = [
            PreparedDataset(
                p["path"],
                p["split_part"],
                split_config=p["split_config"],
                dataset_config=p["dataset_config"],
            )
            for p in partners
        ]
        primary = self.datasets[0]
        self.shard_names = primary.shard_names
        counts = np.asarray(dataset_metadata(primary.root).info().shard_counts, dtype=np.int64)
        self._shard_base = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.matches = self._load_matches()
        self.config: dict[str, Any] = {
            "__class__": "JoinedWebdataset",
            "partners": [
                {
                    "root": str(ds.root),
                    "config": ds.config,
                    "name": p["name"],
                    "subflavors": p["subflavors"],
                }
                for ds, p in zip(self.datasets, partners)
            ],
            "joiner": self.spec["joiner"],
            "by_name": self.spec["by_name"],
        }
        self._build_runs(primary)
        if subset is not None:
            PreparedDataset._apply_subset(self, subset)  # type: ignore[arg-type]
        lengths = self.run_end - self.run_start
        self.run_offset = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

    # the join index ---------------------------------------------------------------------

    def index_path(self) -> Path:
        """Where this join's match index is: named by a digest of what it depends on."""
        digest = hashlib.blake2b(digest_size=12)
        for p, ds in zip(self.spec["partners"], self.datasets):
            fields = [str(ds.root), p["split_part"], p["split_config"], p["dataset_config"]]
            fields += [p["nonmatch"], ds.fingerprint()]
            digest.update(json.dumps(fields).encode() + b"\0")
        return self.root.parent / INDEX_FOLDER / f"join_index_{digest.hexdigest()}.npy"

    def _load_matches(self) -> list[np.ndarray]:
        path = self.index_path()
        rows, total = len(self.datasets) - 1, int(self._shard_base[-1])
        match = None
        if path.is_file():
            match = np.load(path, mmap_mode="r")
            if match.shape != (rows, total):
                match = None  # not this join's: made again by prepare
        preparing = joins_being_prepared()
        if match is None:
            if preparing is None and not self.spec.get("build_on_open"):
                metadataset = self.root.parent.with_name(
                    self.root.parent.name.removesuffix(".cache")
                )
                raise ConfigError(
                    f"{metadataset}: the join of {[str(ds.root) for ds in self.datasets]} "
                    f"is not prepared (no {path}): a join made or edited, or its datasets "
                    f"changed, since the metadataset was prepared; run "
                    f"prepare_metadataset({str(metadataset)!r}) (as with Energon) first"
                )
            match = self._build_index(path, rows, total)
        if preparing is not None:
            preparing.append((self.root, path))
        return [match[i] for i in range(rows)]

    def _build_index(self, path: Path, rows: int, total: int) -> np.ndarray:
        ours = load_key_index(local_only(self.datasets[0].root, "join:"))
        match = np.full((rows, total), -1, dtype=np.int64)
        positions = self._shard_base[ours["shard"].astype(np.int64)] + ours["index"].astype(
            np.int64
        )
        for row in range(rows):
            theirs = load_key_index(local_only(self.datasets[row + 1].root, "join:"))
            where = np.searchsorted(theirs["hash"], ours["hash"])
            where = np.minimum(where, max(0, len(theirs) - 1))
            found = (len(theirs) > 0) & (theirs["hash"][where] == ours["hash"])
            packed = (theirs["shard"][where].astype(np.int64) << _SHIFT) | theirs["index"][
                where
            ].astype(np.int64)
            match[row, positions] = np.where(found, packed, -1)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as file:
            np.save(file, match)
        os.replace(tmp, path)
        return np.load(path, mmap_mode="r")

    def _build_runs(self, primary: PreparedDataset) -> None:
        partners = self.spec["partners"]
        shards, starts, ends = [], [], []
        unmatched: dict[str, list[Any]] = {}  # partner path -> [count, (shard, index)]
        for shard, start, end in zip(
            primary.run_shard.tolist(), primary.run_start.tolist(), primary.run_end.tolist()
        ):
            base = int(self._shard_base[shard])
            keep = np.ones(end - start, dtype=bool)
            for match, partner in zip(self.matches, partners[1:]):
                missing = np.asarray(match[base + start : base + end]) < 0
                if partner["nonmatch"] == "skip":
                    keep &= ~missing
                elif partner["nonmatch"] == "error" and missing.any():
                    if partner["path"] not in unmatched:
                        first = (shard, start + int(np.flatnonzero(missing)[0]))
                        unmatched[partner["path"]] = [0, first]
                    unmatched[partner["path"]][0] += int(missing.sum())
            edges = np.flatnonzero(np.diff(np.concatenate([[0], keep.astype(np.int8), [0]])))
            for a, b in zip(edges[::2].tolist(), edges[1::2].tolist()):
                shards.append(shard)
                starts.append(start + a)
                ends.append(start + b)
        for path, (count, (shard, index)) in unmatched.items():
            key, _ = primary.read(shard, index)
            raise DatasetFormatError(
                f"{self.root}: join: {count} samples of {primary.root} have no partner in "
                f"{path}, e.g. key {key!r}; set nonmatch: skip or none on that dataset"
            )
        self.run_shard = np.asarray(shards, dtype=np.int64)
        self.run_start = np.asarray(starts, dtype=np.int64)
        self.run_end = np.asarray(ends, dtype=np.int64)

    # the Source contract ----------------------------------------------------------------

    def __len__(self) -> int:
        return int(self.run_offset[-1])

    def fingerprint(self) -> str:
        digest = hashlib.blake2b(digest_size=8)
        digest.update(self.root.name.encode())
        for ds in self.datasets:
            digest.update(ds.fingerprint().encode())
        for array in (self.run_shard, self.run_start, self.run_end):
            digest.update(array.tobytes())
        return digest.hexdigest()

    def read(self, shard_id: int, index: int) -> tuple[str, dict[str, Any]]:
        return self.read_range(shard_id, index, index + 1)[0]

    def read_range(self, shard_id: int, start: int, end: int) -> list[tuple[str, dict[str, Any]]]:
        primary = self.datasets[0]
        base = int(self._shard_base[shard_id])
        out = []
        for offset, (key, parts) in enumerate(primary.read_range(shard_id, start, end)):
            entries: list[Any] = [
                (key, parts, self.shard_names[shard_id], shard_id, start + offset)
            ]
            for partner, match in zip(self.datasets[1:], self.matches):
                packed = int(match[base + start + offset])
                if packed < 0:
                    entries.append(None)
                    continue
                p_shard, p_index = packed >> _SHIFT, packed & ((1 << _SHIFT) - 1)
                p_key, p_parts = partner.read(p_shard, p_index)
                if p_key != key:
                    raise DatasetFormatError(
                        f"{self.root}: join index is stale or a key hash collides: {key!r} "
                        f"matched {p_key!r} in {partner.root}; delete {self.root.parent}"
                    )
                entries.append((p_key, p_parts, partner.shard_names[p_shard], p_shard, p_index))
            out.append((key, {"__join__": entries}))
        return out

    def as_file_store(self) -> Any:
        from energon_lite.cache.file_store import WebdatasetFileStore

        return WebdatasetFileStore(local_only(self.datasets[0].root, "join:"))
