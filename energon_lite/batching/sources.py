"""A batch's ``__sources__``: every sample's records in one tuple, sent to the trainer as columns
and made into records there only when something reads them.

A worker sends a batch's ``SourceInfo`` records (one or more per sample) with every batch.
Pickled one by one, each record is rebuilt in the trainer by a Python call of its own: 13.7k
instructions per sample of the W1 batch, the largest part of what the trainer spends
unpickling a batch. :class:`BatchSources` pickles the records of a class that declares
``BATCH_COLUMNS`` (its slotted fields, all of its state) as one list per field, and the
trainer rebuilds them in a single call, the fields set by C loops over the columns.

Most training loops never read a batch's sources, yet making the 32 records of a W1 batch and
freeing them again was still an eighth of the trainer's instructions per batch. So a worker
sends a ``Sample``'s or ``Batch``'s records as :class:`PendingSources` in its ``__sources__``
slot (:func:`deferred_sources`, around the item's pickling), and in the trainer's process,
once batches from workers arrive (:func:`read_lazily`), the slot is read through
:class:`SourcesSlot`, which makes the records from the columns the first time the field is
read and keeps them in the slot. Workers, and a process that never received a batch from
one, read the plain slot (a Python-level descriptor costs every read and write of the field,
and samples are built and read there). What
any reader gets is what it got before: a plain ``tuple`` of equal ``SourceInfo`` records
(equality, hashing, ``repr``, ``dataclasses.asdict``, pickling and copying of the batch all
read the field; a dataclass subclass that re-declares the field keeps the inherited slot,
so it reads through the same descriptor). A batch that is not a ``Sample`` or ``Batch`` (a
dict, a dataclass of the user's own), and records without ``BATCH_COLUMNS``, travel as
before.

In the worker (and without worker processes) ``__sources__`` is a :class:`BatchSources`, a
``tuple`` subclass that compares, hashes and prints as the tuple it holds. Records of several
classes, or of a class without ``BATCH_COLUMNS``, travel as a plain tuple, one by one.
"""

from __future__ import annotations

from collections import deque
from typing import Any


class BatchSources(tuple[Any, ...]):
    """A tuple of source records that pickles as columns (see the module docstring)."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        columns = record_columns(self)
        if columns is None:
            return (tuple, (tuple(self),))
        return (_records, columns)


def record_columns(records: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """``(cls, names, *columns)`` of records all of one class that declares ``BATCH_COLUMNS``
    (one list per field), or None."""
    kinds = {*map(type, records)}
    cls = kinds.pop() if len(kinds) == 1 else None
    names = getattr(cls, "BATCH_COLUMNS", None)
    if names is None:
        return None
    return (cls, names, *[list(map(getattr(cls, name).__get__, records)) for name in names])


def _records(cls: type, names: tuple[str, ...], *columns: list[Any]) -> tuple[Any, ...]:
    """The records of ``cls`` whose fields ``names`` hold ``columns`` (made without their
    ``__init__``, as unpickling does; a slot's descriptor sets it past a frozen class's
    ``__setattr__``, as a dataclass's own ``__init__`` does)."""
    records: tuple[Any, ...] = tuple(map(object.__new__, [cls] * len(columns[0])))
    for name, column in zip(names, columns):
        deque(map(getattr(cls, name).__set__, records, column), maxlen=0)  # runs, keeps nothing
    return records


class PendingSources:
    """A batch's records as :func:`record_columns` gives them, in the trainer's copy of the
    batch until its ``__sources__`` is first read (never seen by a reader)."""

    __slots__ = ("columns",)

    def __init__(self, columns: tuple[Any, ...]) -> None:
        self.columns = columns

    def __reduce__(self) -> tuple[Any, ...]:
        return (PendingSources, (self.columns,))


class SourcesSlot:
    """``Sample.__sources__``: the slot, with :class:`PendingSources` made into their records
    (and kept) on first read."""

    __slots__ = ("slot",)

    def __init__(self, slot: Any) -> None:
        self.slot = slot  # the member descriptor of the dataclass's slot

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = self.slot.__get__(obj, owner)
        if type(value) is PendingSources:
            value = _records(*value.columns)
            self.slot.__set__(obj, value)
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        self.slot.__set__(obj, value)

    def __delete__(self, obj: Any) -> None:
        self.slot.__delete__(obj)


# the classes whose ``__sources__`` slot may hold PendingSources: their slot's member
# descriptor and the SourcesSlot over it (registered by samples/types.py)
_CLASSES: dict[type, tuple[Any, SourcesSlot]] = {}
_LAZY = [False]  # whether this process reads the registered slots through SourcesSlot


def register_slot(cls: type) -> None:
    """Let ``cls``'s ``__sources__`` slot (its own, a dataclass's member descriptor) and that
    of its subclasses be sent as :class:`PendingSources`."""
    member = cls.__dict__["__sources__"]
    _CLASSES[cls] = (member, SourcesSlot(member))


def read_lazily() -> None:
    """From now on this process reads the registered slots through :class:`SourcesSlot`: the
    trainer's process, once batches from workers arrive. A Python-level descriptor costs
    every read and write of the field (a sample is built and read in the worker, or
    without workers here, several times), so the plain slot stays everywhere else."""
    if not _LAZY[0]:
        _LAZY[0] = True
        for cls, (_, lazy) in _CLASSES.items():
            type.__setattr__(cls, "__sources__", lazy)


def read_directly() -> None:
    """This process reads the registered slots directly (a worker process: it only sends)."""
    if _LAZY[0]:
        _LAZY[0] = False
        for cls, (member, _) in _CLASSES.items():
            type.__setattr__(cls, "__sources__", member)


def _slot_of(cls: type) -> Any:
    """The member descriptor of ``cls``'s ``__sources__`` if it is a registered slot."""
    found = next((c for c in cls.__mro__ if "__sources__" in c.__dict__), None)
    return _CLASSES[found][0] if found in _CLASSES else None


def deferred_sources(batch: Any) -> tuple[Any, ...] | None:
    """In a worker, before ``batch`` is pickled: put its records in its ``__sources__`` slot as
    :class:`PendingSources` and return them (put them back with :func:`restore_sources`
    once pickled); None where the batch's sources travel as they are."""
    slot = _slot_of(type(batch))
    if slot is None or _LAZY[0]:  # (pickling would read the records through SourcesSlot)
        return None
    value = slot.__get__(batch, type(batch))
    if type(value) is not tuple and type(value) is not BatchSources:
        return None
    columns = record_columns(value) if value else None
    if columns is None:
        return None
    slot.__set__(batch, PendingSources(columns))
    return value


def restore_sources(batch: Any, records: tuple[Any, ...]) -> None:
    """Undo :func:`deferred_sources` once the batch is pickled."""
    _slot_of(type(batch)).__set__(batch, records)
