"""Energon's draws after a worker snapshot, replayed on keys: which samples it delivered.

With worker processes, Megatron-Energon 7.x saves each worker's last *snapshot* (taken every
``checkpoint_every_sec``, 60 s by default) and the number of batches the worker delivered
after it (``offset``). Which samples those batches held is Energon's random order from the
snapshot on; the snapshot holds everything that order depends on: each wrapper's torch
generator state (``_worker_rng``), the reader's open and pending slices, the buffers'
restore keys. :func:`replayed` runs the same draws on restore keys only (no sample is read)
and returns the worker's tree as it stood after ``offset`` batches, so that
:mod:`energon_lite.resume.energon_state` accounts for it as for a current one.

The draws, as Energon's wrappers make them (read from megatron-energon 7.4's behaviour):

* the reader picks an open slice by ``choice_idx`` over the open slices' full sizes (one
  float32 ``torch.rand`` times the float32 cumulative sum, ``searchsorted`` to the right;
  no draw with one open slice), reads its next sample, and replaces an exhausted slice by
  the last pending one; at the end of its epoch the next epoch's order is a ``randperm``
  of ``shuffle_over_epochs`` copies of its slices, popped from the end;
* a shuffle buffer tops itself up to its size from its source, then pops
  ``torch.randint(0, len)``;
* a blend picks a dataset by ``choice_idx`` over its weights (0 for an exhausted one, or
  one without samples for this worker) and prefixes ``("BlendDataset", index)``;
* a batch takes ``micro_batch_size`` samples.

Replayed: plain datasets and weighted blends (one level of blend) with shuffle buffers.
Refused, naming the part: a packing chain (its groups are the user's
``select_samples_to_pack`` over decoded samples), any other wrapper that holds samples, and
a replay past the end of an epoch of a reader that draws slices with replacement. The replay assumes ``encode_sample``
gave one sample per input in those batches (no skipped sample).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from energon_lite.errors import StateError, short_repr

LOADER = "WebdatasetSampleLoaderDataset"  # Energon's reader of a dataset's slices
# wrappers that hand their source's samples on one for one and hold none between batches
PASS_THROUGH = frozenset(
    {
        "SimpleSavableDatasetWrapper",
        "GcDataset",
        "WatchdogDataset",
        "MapDataset",
        "BatchDataset",
        "RepeatDataset",
        "LogSampleDataset",
        "EpochizeDataset",
    }
)


def replayed(
    tree: dict[str, Any],
    samples: int,
    slices: list[tuple[list[int], int | None]],
    weights: list[float] | None,
    shuffle_size: int | None,
    where: str,
) -> dict[str, Any]:
    """``tree`` (one Energon worker's snapshot, not changed) after it handed out
    ``samples`` more samples. ``slices``: each dataset's slice offsets for this worker and
    its ``shuffle_over_epochs`` (in the order Energon's readers appear); ``weights``: a blend's weights per dataset;
    ``shuffle_size``: the shuffle buffers' size."""
    tree = copy.deepcopy(tree)
    leaves = iter(slices)
    top = _build(tree, leaves, weights, shuffle_size, where)
    for _ in range(samples):
        top.next()
    top.save()
    return tree


def _generator(level: dict[str, Any], where: str) -> torch.Generator:
    saved = level.get("_worker_rng")
    state = saved.get("rng") if isinstance(saved, dict) else None
    if not isinstance(state, bytes):
        raise StateError(
            f"{where}: {level.get('__class__')} has no generator state "
            f"({short_repr(saved)}); its draws cannot be replayed"
        )
    gen = torch.Generator()
    gen.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8).clone())
    return gen


def _choice(gen: torch.Generator, probs: torch.Tensor) -> int:
    if len(probs) == 1:
        return 0
    cdf = torch.cumsum(probs, dim=0)
    value = torch.rand(1, generator=gen) * cdf[-1]
    return int(torch.searchsorted(cdf, value, right=True).item())


class _Node:
    def next(self) -> list[Any]:
        raise NotImplementedError

    def save(self) -> None:
        """Write the replayed position back into the tree's level."""

    def has_samples(self) -> bool:
        return True


def _build(
    level: Any,
    leaves: Any,
    weights: list[float] | None,
    shuffle_size: int | None,
    where: str,
) -> _Node:
    if not isinstance(level, dict):
        raise StateError(f"{where}: {short_repr(level)} is not a dataset level")
    name = level.get("__class__")
    children = level.get("datasets") or []
    if name == LOADER:
        return _Reader(level, next(leaves), where)
    if name in PASS_THROUGH and len(children) == 1:
        return _build(children[0], leaves, weights, shuffle_size, where)
    if name == "ShuffleBufferDataset" and len(children) == 1:
        if shuffle_size is None:
            raise StateError(f"{where}: a shuffle buffer, but this loader has none to size it")
        source = _build(children[0], leaves, weights, shuffle_size, where)
        return _Shuffle(level, source, shuffle_size, where)
    if name == "BlendDataset":
        subs = [_build(child, leaves, None, shuffle_size, where) for child in children]
        if weights is None or len(weights) != len(subs):
            raise StateError(
                f"{where}: a blend of {len(subs)} datasets whose batches must be replayed needs "
                f"one weight each (this loader's weights: {short_repr(weights)}); nested "
                "blends are not replayed"
            )
        return _Blend(level, subs, weights, where)
    raise StateError(
        f"{where}: Energon's {name!r} is not replayed after a worker snapshot (only readers, "
        "shuffle buffers and blends are); save with checkpoint_every_sec=0 so that every "
        "snapshot is current"
    )


class _Reader(_Node):
    def __init__(
        self, level: dict[str, Any], leaf: tuple[list[int], int | None], where: str
    ) -> None:
        self.level, self.where = level, where
        self.offsets, self.multiplier = leaf  # its slice offsets, shuffle_over_epochs
        self.epoch = int(level.get("_epoch_count") or 0)
        self.active = [
            None if s is None else dict(s) for s in level.get("_active_slice_state") or []
        ]
        pending = level.get("_pending_slice_indexes")
        if not self.active or (pending is None and any(a is not None for a in self.active)):
            raise StateError(f"{where}: its reader has open slices but no pending list; corrupt")
        # between epochs (or before the first): its next sample starts an epoch, counted
        # already when the last one ended
        self.starting = pending is None
        self.pending = list(pending or [])
        self.probs = torch.zeros(len(self.active), dtype=torch.float32)
        for i, s in enumerate(self.active):
            if s is not None:
                self.probs[i] = self._size(s["index"])
        self.gen = _generator(level, where)
        self.count = int(level.get("_sample_count") or 0)
        self.epoch_count = int(level.get("_epoch_sample_count") or 0)
        self.popped = int(level.get("_pending_slices_offset") or 0)

    def _size(self, index: int) -> int:
        if not 0 <= index < len(self.offsets) - 1:
            raise StateError(f"{self.where}: slice {index} is not one of this worker's slices here")
        return self.offsets[index + 1] - self.offsets[index]

    def has_samples(self) -> bool:
        return len(self.offsets) > 1

    def _next_epoch(self, advance: bool) -> None:
        """Energon's reader at the end of an epoch: the next epoch's slice order (the worker
        generator's ``randperm`` of ``multiplier`` copies of the slices, popped from the
        end) and its first open slices."""
        count = len(self.offsets) - 1
        if self.multiplier == -1 or count < 1:
            raise StateError(
                f"{self.where}: its replay reaches the end of an epoch of a reader that draws "
                "slices with replacement (or has none); that is not replayed"
            )
        order = list(range(count)) * (self.multiplier or 1)
        if self.multiplier is not None:
            permutation = torch.randperm(len(order), generator=self.gen)
            order = [order[int(i)] for i in permutation]
        order.reverse()
        self.pending, self.popped = order, 0
        self.epoch += 1 if advance else 0
        self.epoch_count = 0
        self.probs = torch.zeros(len(self.active), dtype=torch.float32)
        self.active = [None] * len(self.active)
        for i in range(len(self.active)):
            if not self.pending:
                break
            self._open(i)

    def _open(self, i: int) -> None:
        """Open the last pending slice in place ``i``."""
        index = self.pending.pop()
        self.popped += 1
        self.active[i] = {"__class__": "SliceState", "index": index, "current": self.offsets[index]}
        self.probs[i] = self._size(index)

    def next(self) -> list[Any]:
        if int(torch.count_nonzero(self.probs).item()) == 0:
            self._next_epoch(advance=not self.starting)
            self.starting = False
        i = 0 if len(self.active) == 1 else _choice(self.gen, self.probs)
        state = self.active[i]
        assert state is not None  # a slice with a weight is open
        number = state["current"]
        state["current"] += 1
        read = self.count  # the load map's index of this sample (its restore key's)
        self.count += 1
        self.epoch_count += 1
        if state["current"] >= self.offsets[state["index"] + 1]:
            if self.pending:
                self._open(i)
            else:
                self.active[i] = None
                self.probs[i] = 0
        return ["MapDataset", read, "Webdataset", number]

    def save(self) -> None:
        self.level.update(
            _active_slice_state=self.active,
            _pending_slice_indexes=self.pending,
            _pending_slices_offset=self.popped,
            _sample_count=self.count,
            _epoch_sample_count=self.epoch_count,
            _epoch_count=self.epoch,
        )


class _Shuffle(_Node):
    def __init__(self, level: dict[str, Any], source: _Node, size: int, where: str) -> None:
        self.level, self.source, self.size = level, source, size
        buffer = level.get("_active_buffer")
        keys = buffer.get("_restore_keys") if isinstance(buffer, dict) else None
        if not isinstance(keys, list):
            raise StateError(f"{where}: shuffle buffer {short_repr(buffer)} is not a buffer")
        self.keys = list(keys)
        self.gen = _generator(level, where)

    def has_samples(self) -> bool:
        return self.source.has_samples()

    def next(self) -> list[Any]:
        while len(self.keys) < self.size:
            self.keys.append(self.source.next())
        index = int(torch.randint(0, len(self.keys), (), generator=self.gen).item())
        return self.keys.pop(index)

    def save(self) -> None:
        self.level["_active_buffer"] = {**self.level["_active_buffer"], "_restore_keys": self.keys}
        self.source.save()


class _Blend(_Node):
    def __init__(
        self, level: dict[str, Any], subs: list[_Node], weights: list[float], where: str
    ) -> None:
        self.level, self.subs, self.where = level, subs, where
        exhausted = level.get("exhausted") or [False] * len(subs)
        self.probs = torch.tensor(
            [
                0.0 if gone or not sub.has_samples() else w
                for sub, w, gone in zip(subs, weights, exhausted)
            ],
            dtype=torch.float32,
        )
        self.gen = _generator(level, where)

    def next(self) -> list[Any]:
        index = _choice(self.gen, self.probs)
        return ["BlendDataset", index, *self.subs[index].next()]

    def save(self) -> None:
        for sub in self.subs:
            sub.save()
