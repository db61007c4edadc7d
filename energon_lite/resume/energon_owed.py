"""What one Megatron-Energon 7.x worker still owed of its epoch, read from its saved tree.

Part of continuing an Energon state (:mod:`energon_lite.resume.energon_state`). Per dataset
(leaf) and per Energon worker ``g`` of ``G`` (ranks x workers; a rank without worker
processes counts one):

* the samples its reader had not read: Energon deals each global worker a contiguous range
  of the split (:func:`energon_lite.stages.dealing.worker_bounds`, the same numbers), cuts
  it at shard boundaries and into sequences of about ``max_samples_per_sequence``
  (:func:`energon_slices`); its state names the slices it had not opened
  (``_pending_slice_indexes``) and how far it had read the open ones
  (``_active_slice_state``). The samples it read must add up to its count of the epoch
  (``_epoch_sample_count``), which checks that the dataset, the layout and
  ``max_samples_per_sequence`` are the Energon run's;
* the samples held in its buffers (a shuffle buffer, a packing buffer's reading and
  pre-packing buffers): their restore keys end in ``"Webdataset", <sample number>``, a
  blend's ``"BlendDataset", <branch>`` says which dataset below it, and the load map's
  ``"MapDataset", <index>`` in which epoch it was read.

A worker whose snapshot lies batches behind what it delivered is first replayed
(:mod:`energon_lite.resume.energon_replay`). Samples are numbered as Energon numbers them:
this loader's runs of a dataset laid end to end (its shards in order).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from typing import Any, NamedTuple

import numpy as np

from energon_lite.errors import StateError, short_repr
from energon_lite.resume.energon_replay import LOADER, PASS_THROUGH, replayed
from energon_lite.stages.dealing import worker_bounds
from energon_lite.stages.reader import Reader
from energon_lite.state.restore_key import SampleKey

_BLEND = "BlendDataset"
# wrappers that hold no sample between batches (a filter's count differs from its source's,
# which only a replay needs)
_PASS = PASS_THROUGH | {"FilterDataset"}
# wrappers that hold samples, by the fields their buffers are saved in
_BUFFERS = {
    "ShuffleBufferDataset": ("_active_buffer",),
    "PackingDataset": ("_reading_buffer", "_pre_packing_buffer"),
}
_GENERATOR_FIELDS = ("_generator_sample_key", "_generator_sample_keys", "_generator_offset")


def energon_slices(cum: np.ndarray, first: int, last: int, per_slice: int | None) -> list[int]:
    """Energon's slice offsets of the samples ``[first, last)``: cut at the shard boundaries
    ``cum`` (each run's first sample number), each piece longer than 1.5 x ``per_slice`` cut
    into ``round(length / per_slice)`` near-equal slices; the last offset is ``last``."""
    cuts = [first, *(int(c) for c in cum if first < c < last), last]
    starts: list[int] = []
    for a, b in pairwise(cuts):
        if b <= a:
            continue
        if per_slice is not None and b - a > per_slice * 1.5:
            count = max(round((b - a) / per_slice), 1)
            step = (b - a) / count
            starts += [a + int(i * step) for i in range(count)]
        else:
            starts.append(a)
    ends = [*starts[1:], last]
    starts = [s for s, e in zip(starts, ends) if s < e]  # no empty slice
    return [*starts, last]


class Leaf:
    """One dataset of this loader: its sample numbering (the runs laid end to end)."""

    def __init__(self, reader: Reader, workers: int) -> None:
        source = reader.dataset
        self.id = reader.leaf_id
        self.shard = np.asarray(source.run_shard, dtype=np.int64)
        self.start = np.asarray(source.run_start, dtype=np.int64)
        lengths = np.asarray(source.run_end, dtype=np.int64) - self.start
        self.cum = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self.total = int(self.cum[-1])
        self.per_slice = reader.max_samples_per_sequence
        self.multiplier = reader.multiplier  # Energon's shuffle_over_epochs
        self.bounds = worker_bounds(self.total, workers, reader.samples_before % workers)

    def key(self, number: int, epoch: int, where: str) -> SampleKey:
        if not 0 <= number < self.total:
            raise StateError(
                f"{where}: sample {number} is not in this loader's dataset {self.id} "
                f"({self.total} samples); restore with the Energon run's datasets"
            )
        run = int(np.searchsorted(self.cum, number, side="right")) - 1
        index = int(self.start[run] + number - self.cum[run])
        return SampleKey(self.id, int(self.shard[run]), index, epoch)

    def slices(self, g: int) -> list[int]:
        return energon_slices(
            self.cum, int(self.bounds[g]), int(self.bounds[g + 1]), self.per_slice
        )


class Replay(NamedTuple):
    """What replaying a worker's batches after its snapshot needs of this loader."""

    batch_size: int | None  # Energon's micro_batch_size
    weights: list[float] | None  # a blend's weights per dataset
    shuffle: int | None  # the shuffle buffers' size


class Walk:
    """One Energon worker's dataset tree: the samples it owed, per leaf."""

    def __init__(self, leaves: list[Leaf], g: int, where: str, replay: Replay) -> None:
        self.leaves, self.g, self.where = leaves, g, where
        self.batch_size, self.weights, self.shuffle = replay
        self.owed: list[list[SampleKey]] = [[] for _ in leaves]
        self.epochs = [0] * len(leaves)
        self.batches = 0  # batches it delivered
        self._batched = False
        self._next_leaf = 0
        self._leaf_of: dict[int, int] = {}  # id(loader level) -> leaf

    def worker(self, worker: Any) -> None:
        if not isinstance(worker, dict):
            raise StateError(f"{self.where}: {short_repr(worker)} is not a worker state")
        offset, tree = worker.get("offset"), worker.get("dataset")
        if offset and tree is not None:  # batches delivered after the snapshot: replayed
            if not isinstance(offset, int) or offset < 0 or not self.batch_size:
                raise StateError(
                    f"{self.where}: offset {short_repr(offset)} with micro_batch_size "
                    f"{short_repr(self.batch_size)} is not a number of batches to replay"
                )
            slices = [(leaf.slices(self.g), leaf.multiplier) for leaf in self.leaves]
            tree = replayed(
                tree, offset * self.batch_size, slices, self.weights, self.shuffle, self.where
            )
            self.batches = offset
        elif offset:
            raise StateError(
                f"{self.where}: {short_repr(offset)} batch(es) delivered after a snapshot taken "
                "before its first sample; the state is corrupt"
            )
        if tree is None:  # no snapshot and nothing delivered: its whole share is owed
            for leaf in self.leaves:
                self._unread(leaf, None)
            return
        self._number(tree)
        if self._next_leaf != len(self.leaves):
            raise StateError(
                f"{self.where}: the state reads {self._next_leaf} dataset(s), this loader "
                f"{len(self.leaves)}; restore with the Energon run's dataset or metadataset"
            )
        self._visit(tree)

    def _number(self, level: Any) -> None:
        """Leaves by the order Energon's loaders appear in (depth first), as ours."""
        if not isinstance(level, dict):
            raise StateError(f"{self.where}: {short_repr(level)} is not a dataset level")
        if level.get("__class__") == LOADER:
            self._leaf_of[id(level)] = self._next_leaf
            self._next_leaf += 1
        for child in level.get("datasets") or []:
            self._number(child)

    def _visit(self, level: dict[str, Any]) -> None:
        name = level.get("__class__")
        children = level.get("datasets") or []
        if name == LOADER:
            leaf = self._leaf_of[id(level)]
            if leaf < len(self.leaves):
                self._unread(self.leaves[leaf], level)
            return
        if name == "BatchDataset" and not self._batched:  # the outermost batching
            self._batched = True
            self.batches += int(level.get("_sample_index") or 0)
        if name in _BUFFERS:
            for field in _BUFFERS[name]:
                buffer = level.get(field)
                keys = buffer.get("_restore_keys") if isinstance(buffer, dict) else None
                if not isinstance(keys, list):
                    raise StateError(
                        f"{self.where}: {name}.{field}={short_repr(buffer)} is not a buffer"
                    )
                for key in keys:
                    self._held(level, key)
        elif name not in _PASS and name != _BLEND:
            raise StateError(
                f"{self.where}: Energon's {name!r} is not a wrapper this import knows (it knows "
                f"{', '.join(sorted(_PASS | set(_BUFFERS) | {_BLEND, LOADER}))}); its samples "
                "cannot be accounted for"
            )
        for field in _GENERATOR_FIELDS:
            if level.get(field) is not None:
                raise StateError(
                    f"{self.where}: its {name} is part-way through a generator's outputs "
                    f"({field}={short_repr(level[field])}); the rest of them cannot be delivered alone"
                )
        for child in children:
            self._visit(child)

    def _held(self, level: dict[str, Any], key: Any) -> None:
        """A buffered sample: its dataset below ``level`` (a blend's branch) and number."""
        flat = list(_flat(key))
        branches = [flat[i + 1] for i, part in enumerate(flat[:-1]) if part == _BLEND]
        numbers = [flat[i + 1] for i, part in enumerate(flat[:-1]) if part == "Webdataset"]
        if len(numbers) != 1 or not isinstance(numbers[0], int):
            raise StateError(
                f"{self.where}: buffered restore key {short_repr(key)} names no one sample"
            )
        node = level
        while node.get("__class__") != LOADER:
            children = node.get("datasets") or []
            if node.get("__class__") == _BLEND:
                if not branches or not 0 <= branches[0] < len(children):
                    raise StateError(
                        f"{self.where}: buffered key {short_repr(key)} names no blend branch"
                    )
                node = children[branches.pop(0)]
            elif len(children) == 1:
                node = children[0]
            else:
                raise StateError(f"{self.where}: buffered key {short_repr(key)} names no dataset")
        leaf = self._leaf_of[id(node)]
        epoch = self._epoch(node)
        if len(flat) >= 4 and flat[-4] == "MapDataset" and isinstance(flat[-3], int):
            # the load map's index counts the reader's samples over all epochs: one read
            # before this epoch began was drawn in the epoch before
            before = int(node.get("_sample_count") or 0) - int(node.get("_epoch_sample_count") or 0)
            if flat[-3] < before:
                epoch -= 1
        self.owed[leaf].append(self.leaves[leaf].key(numbers[0], max(epoch, 0), self.where))

    def _epoch(self, loader: dict[str, Any]) -> int:
        return int(loader.get("_epoch_count") or 0)

    def _unread(self, leaf: Leaf, loader: dict[str, Any] | None) -> None:
        """The samples of ``leaf`` that worker ``g`` had not read in its epoch."""
        offsets = leaf.slices(self.g)
        share = offsets[-1] - offsets[0]
        if loader is None:
            ranges = [(offsets[0], offsets[-1])]
            epoch = 0
        else:
            epoch = self._epoch(loader)
            self.epochs[leaf.id] = max(self.epochs[leaf.id], epoch)
            ranges = self._positions(leaf, loader, offsets)
            read = share - sum(b - a for a, b in ranges)
            counted = loader.get("_epoch_sample_count")
            if ranges and read != counted:
                raise StateError(
                    f"{self.where}: dataset {leaf.id}'s positions leave {share - read} of its "
                    f"{share} samples unread, but it counted {short_repr(counted)} read: the "
                    "dataset, the number of ranks or workers, or max_samples_per_sequence "
                    "differ from the Energon run's"
                )
        for a, b in ranges:
            for number in range(a, b):
                self.owed[leaf.id].append(leaf.key(number, epoch, self.where))

    def _positions(
        self, leaf: Leaf, loader: dict[str, Any], offsets: list[int]
    ) -> list[tuple[int, int]]:
        pending = loader.get("_pending_slice_indexes")
        active = loader.get("_active_slice_state") or []
        count = len(offsets) - 1
        if pending is None:
            if (
                any(a is not None for a in active)
                or loader.get("_pending_slices_offset") is not None
            ):
                raise StateError(
                    f"{self.where}: dataset {leaf.id}'s reader has open slices but no pending list"
                )
            if int(loader.get("_sample_count") or 0) == 0:  # not started: its share is owed
                return [(offsets[0], offsets[-1])]
            return []  # between epochs: its epoch is read
        ranges = []
        for index in pending:
            if not isinstance(index, int) or not 0 <= index < count:
                raise StateError(
                    f"{self.where}: dataset {leaf.id}'s pending slice {short_repr(index)} is not "
                    f"one of its {count} slices here: the dataset, the layout or "
                    "max_samples_per_sequence differ from the Energon run's"
                )
            ranges.append((offsets[index], offsets[index + 1]))
        for slot in active:
            if slot is None:
                continue
            index, current = slot.get("index"), slot.get("current")
            if not (
                isinstance(index, int) and 0 <= index < count and isinstance(current, int)
            ) or not (offsets[index] <= current <= offsets[index + 1]):
                raise StateError(
                    f"{self.where}: dataset {leaf.id}'s open slice {short_repr(slot)} is not "
                    "inside its slices here: the dataset, the layout or "
                    "max_samples_per_sequence differ from the Energon run's"
                )
            ranges.append((current, offsets[index + 1]))
        return ranges


def _flat(key: Any) -> Iterator[Any]:
    if isinstance(key, (list, tuple)):
        for part in key:
            yield from _flat(part)
    else:
        yield key
