"""Restore keys: where an item came from, enough to build it again by random access.

Every item in the pipeline has a restore key: in its ``__restore_key__`` (a sample's field, a
raw sample's entry), or beside it, where a hook returned a plain dict without one (the stage
that made the item knows its key, and the buffers above keep it next to the item:
``Stage.key_of``). The Reader makes a :class:`SampleKey`; a stage that makes new items from old ones wraps its inputs' keys
(:class:`PackKey` for a pack of samples, :class:`SubKey` for the n-th output of a hook that
yields several, :class:`IndexKey` for an item whose hook read Energon's hook indices).
Stages route a key by its type, never by position in a tuple, and buffers save keys with
:func:`to_plain` and read them back with :func:`from_plain`.

A batch's keys (its ``__restore_key__``, one per sample) are a :class:`BatchRestoreKeys`: a
worker sends one with every batch, and pickled key by key each ``SampleKey`` is a reduce call
of its own in the trainer (about a fifth of what unpickling a W1 batch's non-tensor part
cost). A batch of sample keys pickles as four tuples of numbers instead, and the trainer
rebuilds them in one call (C loops over the columns) as a plain ``list`` of equal
``SampleKey`` objects; in the worker (and without worker processes) the field is the ``list``
subclass, which compares and prints as the list it holds. Any other key, or a mix, travels
key by key.

Plain forms (msgpack-able lists with a tag first):
``["s", leaf, shard, index, epoch]``, ``["pack", member, ...]``, ``["sub", parent, n]``,
``["ix", parent, worker, batch, sample]``.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat
from typing import Any, NamedTuple, Union

from energon_lite.errors import StateError, short_repr


class SampleKey(NamedTuple):
    """A raw sample: leaf dataset, shard, the sample's index in the shard, and the reader
    epoch it was drawn in (per-sample randomness differs per epoch)."""

    leaf: int
    shard: int
    sample: int
    epoch: int

    def __reduce__(self) -> tuple[Any, ...]:
        # A batch carries one per sample: rebuilt by tuple.__new__ (C) in the trainer, not by
        # the named tuple's Python-level __new__
        return (tuple.__new__, (SampleKey, tuple(self)))


class BatchRestoreKeys(list[Any]):
    """A batch's restore keys, pickled as columns when they are all sample keys (see the
    module docstring)."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        if not self or any(type(key) is not SampleKey for key in self):
            return (list, (list(self),))
        return (_sample_keys, tuple(zip(*self)))


def batch_restore_keys(column: Iterable[Any]) -> list[Any]:
    """A batch's ``__restore_key__`` list of the samples' keys ``column``."""
    return BatchRestoreKeys(column)


def _sample_keys(*columns: tuple[int, ...]) -> list[SampleKey]:
    """The sample keys whose fields hold ``columns`` (made by ``tuple.__new__``, as a single
    ``SampleKey`` is unpickled)."""
    return list(map(tuple.__new__, repeat(SampleKey), zip(*columns)))


class PackKey(NamedTuple):
    """A packed sample: the keys of its members, in pack order."""

    members: tuple[RestoreKey, ...]


class SubKey(NamedTuple):
    """Output number ``sub`` of a hook that yielded several items for the input ``parent``."""

    parent: RestoreKey
    sub: int


class IndexKey(NamedTuple):
    """The output of ``encode_sample`` for ``parent`` made while the hook read
    ``current_batch_index`` / ``current_sample_index`` (or seeded ``restore_seeds`` from
    them): the values it saw (``batch``, ``sample``; -1: none was set) and the global worker
    ``worker`` that made it, so that fetching it again replays them
    (``energon_lite/task_encoder/hook_index.py``)."""

    parent: RestoreKey
    worker: int
    batch: int
    sample: int


RestoreKey = Union[SampleKey, PackKey, SubKey, IndexKey]  # noqa: UP007 (a runtime alias, py3.10)


def to_plain(key: RestoreKey) -> list[Any]:
    """The msgpack-able form of a key, tag first."""
    if isinstance(key, SampleKey):
        return ["s", key.leaf, key.shard, key.sample, key.epoch]
    if isinstance(key, PackKey):
        return ["pack", *(to_plain(member) for member in key.members)]
    if isinstance(key, SubKey):
        return ["sub", to_plain(key.parent), key.sub]
    if isinstance(key, IndexKey):
        return ["ix", to_plain(key.parent), key.worker, key.batch, key.sample]
    raise StateError(f"not a restore key: {short_repr(key)}")


def from_plain(data: Any) -> RestoreKey:
    """Read back a key saved with :func:`to_plain`; StateError for anything else."""
    if isinstance(data, (SampleKey, PackKey, SubKey, IndexKey)):
        return data
    if isinstance(data, (list, tuple)) and data:
        tag, rest = data[0], data[1:]
        if tag == "s" and len(rest) == 4 and all(_is_int(x) for x in rest):
            return SampleKey(*(int(x) for x in rest))
        if tag == "pack" and rest:
            return PackKey(tuple(from_plain(member) for member in rest))
        if tag == "sub" and len(rest) == 2 and _is_int(rest[1]):
            return SubKey(from_plain(rest[0]), int(rest[1]))
        if tag == "ix" and len(rest) == 4 and all(_is_int(x) for x in rest[1:]):
            return IndexKey(from_plain(rest[0]), *(int(x) for x in rest[1:]))
    raise StateError(f"not a restore key: {short_repr(data)}; the state is corrupt")


def key_in(item: Any) -> RestoreKey | None:
    """The restore key ``item`` carries itself (a dict's ``__restore_key__`` entry, a
    sample's attribute), or None when it carries none (a plain dict from a hook)."""
    if type(item) is dict:  # raw samples are dicts (the common case in a shuffle buffer)
        return item.get("__restore_key__")
    return getattr(item, "__restore_key__", None)


def sample_keys(key: RestoreKey) -> list[SampleKey]:
    """The raw samples a key was built from, in order."""
    if isinstance(key, SampleKey):
        return [key]
    if isinstance(key, PackKey):
        return [sample for member in key.members for sample in sample_keys(member)]
    return sample_keys(key.parent)


def without_index(key: Any) -> Any:
    """``key`` with every :class:`IndexKey` replaced by its parent: what per-sample
    randomness (``sample_rng``) is keyed by, so reading the hook indices changes no draw."""
    if isinstance(key, IndexKey):
        return without_index(key.parent)
    if isinstance(key, PackKey):
        return PackKey(tuple(without_index(member) for member in key.members))
    if isinstance(key, SubKey):
        return SubKey(without_index(key.parent), key.sub)
    return key


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
