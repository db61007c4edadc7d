"""A batch's ``__sources__``: every sample's records in one tuple, sent to the trainer as columns.

A worker sends a batch's ``SourceInfo`` records (one or more per sample) with every batch.
Pickled one by one, each record is rebuilt in the trainer by a Python call of its own: 13.7k
instructions per sample of the W1 batch, the largest part of what the trainer spends
unpickling a batch. :class:`BatchSources` pickles the records of a class that declares
``BATCH_COLUMNS`` (its slotted fields, all of its state) as one list per field, and the
trainer rebuilds them in a single call, the fields set by C loops over the columns.

What the trainer gets is a plain ``tuple`` of the same records, equal field for field; in the
worker (and without worker processes) ``__sources__`` is a :class:`BatchSources`, a ``tuple``
subclass that compares, hashes and prints as the tuple it holds. Records of several classes,
or of a class without ``BATCH_COLUMNS``, travel as a plain tuple, one by one.
"""

from __future__ import annotations

from collections import deque
from typing import Any


class BatchSources(tuple[Any, ...]):
    """A tuple of source records that pickles as columns (see the module docstring)."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        kinds = {*map(type, self)}
        cls = kinds.pop() if len(kinds) == 1 else None
        names = getattr(cls, "BATCH_COLUMNS", None)
        if names is None:
            return (tuple, (tuple(self),))
        columns = [list(map(getattr(cls, name).__get__, self)) for name in names]
        return (_records, (cls, names, *columns))


def _records(cls: type, names: tuple[str, ...], *columns: list[Any]) -> tuple[Any, ...]:
    """The records of ``cls`` whose fields ``names`` hold ``columns`` (made without their
    ``__init__``, as unpickling does; a slot's descriptor sets it past a frozen class's
    ``__setattr__``, as a dataclass's own ``__init__`` does)."""
    records: tuple[Any, ...] = tuple(map(object.__new__, [cls] * len(columns[0])))
    for name, column in zip(names, columns):
        deque(map(getattr(cls, name).__set__, records, column), maxlen=0)  # runs, keeps nothing
    return records
