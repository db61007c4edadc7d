"""How a worker's item (batch, state, held segments) travels to the trainer process.

torch's worker queue pickles each item in a feeder thread; when that fails, the thread prints
a traceback and drops the item, and the trainer waits for it forever. So the worker pickles
each item itself, in its main thread (:func:`pickled_item`), with the queue's own pickler
(``ForkingPickler``, where torch registers its tensor reducers: tensors still travel as
shared memory, the pool's segments as :mod:`energon_lite.batching.memory` sends them), and a
failure is a :class:`~energon_lite.errors.ConfigError` naming the batch's keys. The queue
then gets :class:`PickledItem`, whose unpickling in the trainer gives back the item: the
feeder thread only copies its bytes. Until the worker did this, every batch was pickled twice
(once to test it, once by the queue). The item is one pickle, batch and held segments
together, because the trainer checks that a batch's tensors and its ``Held`` entry share one
storage object, which only one pickle's memo gives. The dataset iterated by a plain torch
``DataLoader`` yields its batches as they are (its ``collate_fn`` gets them), test-pickled
first as before (:func:`check_sendable`), and the queue pickles them.

Tensors themselves travel as file descriptors (torch's default sharing strategy on Linux),
handed over by ``multiprocessing``'s resource sharer, which listens on a Unix socket in the
worker's temp folder (``$TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX``). A socket path has at
most 107 bytes on Linux, so a ``TMPDIR`` of 76 or more characters makes every batch with a
tensor fail in the trainer (only recent Pythons fall back to ``/tmp`` on their own), and the
run hangs without a word. Each worker therefore binds that socket once when it starts; a
refusal is a :class:`~energon_lite.errors.ConfigError` naming the folder, raised in the
trainer as any worker's error is.
"""

from __future__ import annotations

import io
import os
import pickle
import socket
import sys
import tempfile
from multiprocessing import connection
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import torch
import torch.multiprocessing

from energon_lite.batching.sources import deferred_sources, read_lazily, restore_sources
from energon_lite.errors import ConfigError
from energon_lite.samples.types import basic_sample_keys


class PickledItem:
    """A worker's item pickled by :func:`pickled_item`; unpickled, the item itself."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return item_loaded, (self.data,)


class _ItemUnpickler(pickle.Unpickler):
    """``pickle.loads`` with the classes and functions an item names looked up in the modules
    already imported. An item names a dozen (the batch's class, torch's tensor rebuild, the
    restore keys, the sources, the pool's segment); pickle's own lookup imports each one
    again (an ``__import__`` call per name, about a tenth of what the trainer spends per
    batch). A module not imported yet, or a dotted name, goes pickle's way."""

    def find_class(self, module: str, name: str) -> Any:
        found = sys.modules.get(module)
        if found is None or "." in name:
            return super().find_class(module, name)
        sys.audit("pickle.find_class", module, name)  # as pickle's own lookup does
        return getattr(found, name)


def item_loaded(data: bytes) -> Any:
    """The trainer's side of :class:`PickledItem`: the item pickled in ``data`` (its batch's
    ``__sources__`` made when first read, :mod:`energon_lite.batching.sources`)."""
    read_lazily()
    return _ItemUnpickler(io.BytesIO(data)).load()


def pickled_item(item: tuple[Any, ...], batch: Any, worker: int) -> PickledItem:
    """``item`` (which holds ``batch``) pickled as torch's queue would pickle it; a
    ConfigError naming the batch's keys if it cannot be."""
    buffer = io.BytesIO()
    records = deferred_sources(batch)  # made in the trainer when read (batching/sources.py)
    try:
        ForkingPickler(buffer, pickle.HIGHEST_PROTOCOL).dump(item)
    except Exception as exc:
        raise _unsendable(batch, worker, exc) from exc
    finally:
        if records is not None:
            restore_sources(batch, records)
    return PickledItem(buffer.getvalue())


class _NullSink(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return len(data)


class _StructurePickler(ForkingPickler):
    """The queue's pickler, with tensors and arrays replaced by a constant."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, (torch.Tensor, np.ndarray)):
            return int, (0,)
        return NotImplemented


def check_sendable(batch: Any, worker: int) -> None:
    """Raise a ConfigError naming the batch's keys if torch's queue could not send it: the
    batch's structure test-pickled, tensors and arrays skipped. For a worker whose batches
    torch's queue pickles itself (the dataset iterated by a plain torch ``DataLoader``, whose
    ``collate_fn`` gets the batch as it is)."""
    try:
        _StructurePickler(_NullSink(), -1).dump(batch)
    except Exception as exc:
        raise _unsendable(batch, worker, exc) from exc


def _unsendable(batch: Any, worker: int, exc: Exception) -> ConfigError:
    keys = basic_sample_keys(batch)["__key__"] if not isinstance(batch, (list, tuple)) else None
    return ConfigError(
        f"worker {worker}: a batch of type {type(batch).__module__}.{type(batch).__qualname__} "
        f"(keys {keys!r}) cannot be pickled to send it to the trainer process "
        f"({type(exc).__name__}: {exc}); define sample and batch classes at module level "
        "in an importable module and keep unpicklable objects (locks, open files, "
        "lambdas, generators) out of batches"
    )


def check_descriptors_travel(worker: int) -> None:
    """Raise a ConfigError naming the temp folder if this worker's resource sharer could not
    listen there, so that no tensor could reach the trainer (see the module docstring)."""
    # (default_family and arbitrary_address are public in the module, not in its type stubs)
    family = connection.default_family  # type: ignore[attr-defined]
    if torch.multiprocessing.get_sharing_strategy() != "file_descriptor" or family != "AF_UNIX":
        return
    address = ""
    try:
        # the address the resource sharer's listener takes, in the folder it takes it in
        address = connection.arbitrary_address("AF_UNIX")  # type: ignore[attr-defined]
        with socket.socket(socket.AF_UNIX) as probe:
            probe.bind(address)
        os.unlink(address)
    except OSError as exc:
        where = f"{address!r} ({len(os.fsencode(address))} bytes)" if address else "a socket"
        raise ConfigError(
            f"worker {worker}: batches with tensors cannot be sent to the trainer process: "
            f"torch passes their file descriptors through a Unix socket in the temp folder, "
            f"and {where} cannot be bound there ({type(exc).__name__}: {exc}); the temp "
            f"folder is {tempfile.gettempdir()!r} (TMPDIR={os.environ.get('TMPDIR')!r}): set "
            "TMPDIR to a writable folder with a short path (a Unix socket path has at most "
            "107 bytes on Linux, 103 on macOS), e.g. TMPDIR=/tmp"
        ) from exc
