"""A batch's ``__restore_key__``: one key per sample in a list that travels to the trainer as columns.

A worker sends a batch's restore keys with every batch. Pickled one by one, each
:class:`~energon_lite.state.restore_key.SampleKey` is a reduce call of its own in the trainer
(its class, a tuple of four numbers, ``tuple.__new__``): about a fifth of what unpickling a W1
batch's non-tensor part costs. :class:`BatchRestoreKeys` pickles a batch of sample keys as four
lists of numbers, and the trainer rebuilds every key in one call (C loops over the columns).

What the trainer gets is a plain ``list`` of equal ``SampleKey`` objects; in the worker (and
without worker processes) ``__restore_key__`` is a :class:`BatchRestoreKeys`, a ``list``
subclass that compares and prints as the list it holds. Any other key (a pack's, a hook's),
or a mix, travels as a plain list, key by key, as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat
from typing import Any

from energon_lite.state.restore_key import SampleKey


class BatchRestoreKeys(list[Any]):
    """A list of restore keys that pickles as columns (see the module docstring)."""

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
