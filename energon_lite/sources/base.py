"""``Source``: what the Reader needs from a dataset, whatever stores it.

A source is one split of one dataset, described as *runs*: ``(shard_id, start, end)``
ranges of consecutive samples (three numpy arrays, never a Python object per sample), plus
random access to a sample or a range of samples of a shard. The Reader cuts runs into
slices, deals slices to workers and reads them; nothing above the Reader knows how a source
stores its samples. A tar folder (:class:`energon_lite.shards.dataset.PreparedDataset`), a
video-text table, or any dataset kind a flavor registers (:mod:`energon_lite.sources.kinds`)
implements it.

Rules a source keeps:

* ``read``/``read_range`` return ``(key, parts)`` with ``parts`` a dict of raw values (bytes
  for tar members); they are pure functions of their arguments, so a restore can re-read.
* ``fingerprint()`` changes whenever the samples a ``(shard_id, index)`` names change; it
  must not depend on where the dataset lives, so a copy restores a state of the original.
* A source is pickled into worker processes: hold paths and arrays, open files lazily.
* Optionally ``prefetch_enabled()`` and ``prefetch(shard_ids)``: the Reader names the shards
  of a worker's next slices, so a remote source can fetch them ahead (a hint, never state).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from energon_lite.storage import StoragePath


@runtime_checkable
class Source(Protocol):
    """One split of one dataset as runs of samples with random access (see the module doc)."""

    @property
    def root(self) -> StoragePath:  # where the dataset lives (prepared folder, local or remote)
        ...

    split_part: str
    config: dict[str, Any]  # dataset.yaml: sample type, field map, subflavors ...
    shard_names: list[str]
    run_shard: np.ndarray  # int64 [runs]: the shard of each run
    run_start: np.ndarray  # int64 [runs]: first sample index in the shard
    run_end: np.ndarray  # int64 [runs]: one past the last

    def __len__(self) -> int: ...

    def read(self, shard_id: int, index: int) -> tuple[str, dict[str, Any]]: ...

    def read_range(
        self, shard_id: int, start: int, end: int
    ) -> list[tuple[str, dict[str, Any]]]: ...

    def fingerprint(self) -> str: ...
