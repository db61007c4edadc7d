"""The one door to torch's ``DataLoader`` internals: the worker pool as the trainer sees it.

energon_lite keeps torch's worker pool (its processes, queues and round robin). To heal it
(:mod:`energon_lite.loader.healing`) the trainer must know which worker's batch it waits
for, how many batches were asked, which workers torch still expects batches from, and the
queue to wait on; torch has no public API for any of it. This module is the only one that
reads torch's private names; :data:`PRIVATE_NAMES` lists every one. A torch that renamed or
dropped one is caught when the first pool starts (:func:`check_torch`, and each pool's own
fields when it is made): the run stops with a :class:`TorchInternalsError` naming torch's
version and the missing name, instead of healing wrongly. ``pyproject.toml`` allows the
torch versions that are tested (docs/architecture.md, "torch's worker pool").

torch's ``SIGCHLD`` handler raises ``RuntimeError: DataLoader worker ... killed`` in the
trainer's main thread, wherever it is, when a worker of a pool that torch watches dies. A
pool that heals is not watched: :class:`WorkerPool` starts torch's iterator with the
handler held (a ``SIGCHLD`` that comes meanwhile is only noted) and unregisters the new
workers before it lets the handler run again, so a worker that dies while its pool starts
(in its ``worker_init_fn``, its first restore) is noticed and replaced like any other.
"""

from __future__ import annotations

import contextlib
import functools
import math
import multiprocessing.connection
import select
import signal
import threading
from collections.abc import Iterator
from multiprocessing.process import BaseProcess
from typing import Any

import torch
from torch.utils.data import DataLoader
from torch.utils.data import _utils as torch_data_utils
from torch.utils.data import dataloader as torch_dataloader
from torch.utils.data._utils import signal_handling as torch_signal_handling

from energon_lite.errors import EnergonLiteError
from energon_lite.fork_hook import parents_objects_kept_from_children

# what is read of torch's iterator, and why (each pool checks them once it is made)
ITERATOR_FIELDS = {
    "_workers": "the worker processes",
    "_workers_status": "which workers torch still expects batches from",
    "_task_info": "which worker each batch asked for is coming from",
    "_rcvd_idx": "the batch handed out next",
    "_send_idx": "the batches asked so far",
    "_data_queue": "the queue the batches arrive on",
    "_pin_memory": "whether a pin-memory thread reads that queue",
    "_worker_pids_set": "whether torch's SIGCHLD handler watches the workers",
    "_shutdown_workers": "shutting the workers down",
    "_next_data": "the next batch without the profiler range torch opens around it",
    "_num_yielded": "the batches handed out, counted as torch's own next() counts them",
    "_sampler_iter": "whether torch's next() would restart the iterator first",
    "_IterableDataset_len_called": "whether torch's next() checks a length it reported",
}
# module-level names, checked once per process
MODULE_NAMES = {
    (torch_dataloader, "_MultiProcessingDataLoaderIter"): "the iterator over worker processes",
    (torch_data_utils, "MP_STATUS_CHECK_INTERVAL"): "how long torch waits for a worker to exit",
    (torch_signal_handling, "_set_SIGCHLD_handler"): "installing torch's SIGCHLD handler",
    (torch_signal_handling, "_remove_worker_pids"): "unregistering workers from that handler",
    (torch.autograd, "_profiler_enabled"): "whether a profiler is on (next() then opens its range)",
}
# and "_utils" (torch's private module), "_reader" (the multiprocessing queue's read end)
# and "_poll" (the queue's poll of its read end, replaced by :func:`_reader_poll` when there)
PRIVATE_NAMES = sorted(
    {*ITERATOR_FIELDS, *(name for _, name in MODULE_NAMES), "_utils", "_reader", "_poll"}
)


class TorchInternalsError(EnergonLiteError, RuntimeError):
    """The installed torch lacks a private name of its ``DataLoader`` that healing reads."""


def _missing(version: str, where: str, name: str, what: str) -> TorchInternalsError:
    return TorchInternalsError(
        f"torch {version}: {where} has no {name!r} ({what}), which energon_lite reads to "
        "heal its worker pool; install a torch that pyproject.toml allows, or pass "
        "max_worker_restarts=0 (no healing)"
    )


@functools.cache
def check_torch(version: str = torch.__version__) -> None:
    """Raise :class:`TorchInternalsError` if a module-level private name is missing."""
    for (module, name), what in MODULE_NAMES.items():
        if not hasattr(module, name):
            raise _missing(version, module.__name__, name, what)


def check_iterator(iterator: Any, version: str = torch.__version__) -> None:
    """Raise :class:`TorchInternalsError` if torch's ``iterator`` lacks a field read here."""
    where = f"{type(iterator).__name__} (torch's DataLoader iterator)"
    for name, what in ITERATOR_FIELDS.items():
        if not hasattr(iterator, name):
            raise _missing(version, where, name, what)
    if not iterator._pin_memory and not hasattr(iterator._data_queue, "_reader"):
        raise _missing(version, f"{where}._data_queue", "_reader", "the queue's read end")


@contextlib.contextmanager
def _sigchld_held() -> Iterator[None]:
    """While torch starts a pool: a ``SIGCHLD`` is noted, not handled; torch's handler runs
    once afterwards for what came (it then sees only other pools' workers). Only the main
    thread may change a handler; elsewhere torch watches a pool from its registration in
    ``iter()`` to :func:`_unwatch` (a worker's death in between raises, as in torch)."""
    if not hasattr(signal, "SIGCHLD") or threading.current_thread() is not threading.main_thread():
        yield
        return
    torch_signal_handling._set_SIGCHLD_handler()  # installed now: iter() leaves ours alone
    previous = signal.getsignal(signal.SIGCHLD)
    if previous is None:  # a handler set outside Python: cannot be put back
        yield
        return
    came: list[int] = []
    signal.signal(signal.SIGCHLD, lambda signum, frame: came.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGCHLD, previous)
        if came and callable(previous):
            previous(signal.SIGCHLD, None)


def _unwatch(iterator: Any) -> None:
    """Unregister the pool's workers from torch's ``SIGCHLD`` handler."""
    if iterator._worker_pids_set:
        torch_signal_handling._remove_worker_pids(id(iterator))
        iterator._worker_pids_set = False


def _reader_poll(reader: multiprocessing.connection.Connection) -> Any:
    """``reader.poll`` (True when a message can be read within ``timeout`` seconds, None:
    no limit) over one ``select.poll`` object kept with it."""
    poller = select.poll()
    poller.register(reader.fileno(), select.POLLIN)

    def poll(timeout: float | None = 0.0) -> bool:
        return bool(poller.poll(-1 if timeout is None else max(0, math.ceil(timeout * 1000))))

    return poll


class WorkerPool:
    """torch's iterator over a ``DataLoader`` with worker processes, and what the trainer
    reads of it. ``watched=False`` (a pool that heals): torch's ``SIGCHLD`` handler never
    raises for its workers, from the first fork on."""

    def __init__(self, loader: DataLoader, *, watched: bool) -> None:
        check_torch()
        with contextlib.ExitStack() as stack:
            if not watched:
                stack.enter_context(_sigchld_held())
            with parents_objects_kept_from_children():  # torch forks the workers in iter()
                iterator: Any = iter(loader)
            try:
                check_iterator(iterator)
            except TorchInternalsError:
                getattr(iterator, "_shutdown_workers", lambda: None)()
                raise
            if not watched:
                _unwatch(iterator)
        queue = iterator._data_queue
        if not iterator._pin_memory and hasattr(select, "poll") and hasattr(queue, "_poll"):
            # torch's queue polls its read end before each read, after the pool's own wait
            # found it readable: one kept poll object instead of a selector built per call
            queue._poll = _reader_poll(queue._reader)
        self._iterator = iterator
        # (the descriptors it watches, a poll object over them) for :meth:`wait`
        self.poll_set: tuple[tuple[int, ...], Any] | None = None

    def __iter__(self) -> WorkerPool:
        return self

    def __next__(self) -> Any:
        it = self._iterator
        if (
            it._sampler_iter is None
            or it._IterableDataset_len_called is not None
            or torch.autograd._profiler_enabled()
        ):
            return next(it)
        # torch's next() without its profiler range (a ``record_function`` costs about as
        # much as the rest of the trainer's receive when no profiler is on); with one on,
        # the range is there as before
        data = it._next_data()
        it._num_yielded += 1
        return data

    def close(self) -> None:
        """Shut the workers down (again: a no-op)."""
        self._iterator._shutdown_workers()

    @property
    def processes(self) -> list[BaseProcess]:
        """The worker processes, by torch's worker id."""
        return list(self._iterator._workers)

    def expects(self, physical: int) -> bool:
        """Whether torch still expects batches from worker ``physical`` this pass."""
        return bool(self._iterator._workers_status[physical])

    def awaited(self) -> int | None:
        """torch's id of the worker whose batch the trainer waits for (None: none asked)."""
        info = self._iterator._task_info.get(self._iterator._rcvd_idx)
        return info[0] if info else None

    def in_flight(self) -> int:
        """Batches asked of the pool and not yet handed to the trainer."""
        return max(0, self._iterator._send_idx - self._iterator._rcvd_idx)

    def wait(self, slice_s: float) -> str:
        """Wait up to ``slice_s`` for the awaited batch to be readable or a worker to end:
        ``"ready"``, ``"ended"``, ``"idle"`` (neither), or ``"ask"`` (nothing to wait on
        here: a batch torch has already read, the pin-memory thread's queue; torch's own
        ``timeout`` bounds its wait then). One ``select`` and no exception per slice."""
        it = self._iterator
        info = it._task_info.get(it._rcvd_idx)
        if info is None or len(info) != 1 or it._pin_memory:
            return "ask"
        if not it._workers_status[info[0]]:  # its worker has ended: torch skips its task
            return "ask"
        reader = it._data_queue._reader
        ends = [w.sentinel for i, w in enumerate(it._workers) if it._workers_status[i]]
        if not hasattr(select, "poll"):
            found = multiprocessing.connection.wait([reader, *ends], timeout=slice_s)
            if any(item is not reader for item in found):
                return "ended"
            return "ready" if found else "idle"
        # one poll object while the descriptors stay the same (multiprocessing's ``wait``
        # builds a selector and registers each one on every call: about half of this
        # method's cost per batch)
        fds = (reader.fileno(), *ends)
        if self.poll_set is None or self.poll_set[0] != fds:
            poller = select.poll()
            for fd in fds:
                poller.register(fd, select.POLLIN)
            self.poll_set = (fds, poller)
        events = self.poll_set[1].poll(math.ceil(slice_s * 1000))
        if any(fd != fds[0] for fd, _ in events):
            return "ended"
        return "ready" if events else "idle"

    def kill(self, physical: int) -> None:
        """SIGKILL worker ``physical`` (a stalled one: torch's shutdown would wait for it to
        finish its batch) and wait for it as long as torch waits for a worker's exit."""
        process = self._iterator._workers[physical]
        if process.is_alive():
            process.kill()
            process.join(timeout=torch_data_utils.MP_STATUS_CHECK_INTERVAL)
