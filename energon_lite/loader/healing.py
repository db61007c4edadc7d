"""Workers that heal: a worker that dies or stalls is replaced and the stream goes on.

Every batch carries its worker's state, and the loader keeps, per worker, the state of the
last batch the trainer *received*. That is all a replacement needs. When a worker process
dies (killed, out of memory, a crash in native code) or, with ``on_timeout="restart"``,
gives no batch within ``timeout_seconds``, the loader shuts torch's worker pool down and
starts a new one from those states, exactly as a checkpoint restore would: the trainer's
next batch is the one it would have had, batches made but never received are made again,
none twice. torch's ``DataLoader`` cannot start one worker alone (its queues, worker ids and
round robin are fixed when its iterator is made), so the whole pool is replaced; the other
workers' prefetched batches are made again too, the same ones.

Bounded: at most ``max_worker_restarts`` restarts within ``worker_restart_window_seconds``
(default 3 in an hour; 0 turns healing off: a lost worker stops the run, as torch does).
Each restart is logged with the worker, its cause (exit code, signal, or a stall with the
worker's stack, taken with :mod:`faulthandler` on ``SIGUSR1`` before the worker is killed),
the batches made again and the samples its buffers fetch again; past the budget the run
stops with a :class:`~energon_lite.errors.WorkerRestartError` naming every restart.

A late batch is not silent either: once the trainer has waited the watchdog's timeout for
one, it logs the worker, its pid, its kernel state and its stack (:meth:`Healer.notice_late`,
the same ``faulthandler`` dump, which needs no interpreter lock: it shows a worker stuck in
native code that its own watchdog thread cannot see), once per wait, and goes on waiting.

Cost on a healthy run: about a microsecond per batch in the trainer. A waiting trainer
waits on torch's queue and on its workers' process sentinels together (one ``select``),
so a dead worker wakes it at once; where torch reads the queue itself (a pin-memory
thread, a batch it already holds), it waits in slices of :data:`POLL_S` (torch's own
``timeout``) and looks at its workers after each. torch's ``SIGCHLD`` handler, which would
raise in whatever the trainer's main thread is doing at that moment (the training step),
is switched off for these workers.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import faulthandler
import functools
import multiprocessing.connection
import os
import shutil
import signal
import tempfile
import time
import weakref
from collections.abc import Callable
from typing import Any, TextIO

from torch.utils.data import _utils as torch_data_utils

from energon_lite.errors import (
    ConfigError,
    StateError,
    WorkerRestartError,
    WorkerTimeoutError,
    logger,
)

DEFAULT_MAX_RESTARTS = 3
DEFAULT_WINDOW_S = 3600.0
POLL_S = 0.25  # where torch reads its queue: the longest wait without a look at the workers
_SLICE_S = 1.0  # where the trainer waits on the queue and the workers: one select's longest
_STACK_WAIT_S = 2.0  # how long the trainer waits for a stalled worker's stack
_EXIT_WAIT_S = 2.0  # how long a transport error waits for a worker's exit status
_DUMP_FILE: list[TextIO] = []  # a worker's open stack file (faulthandler writes into it)


@dataclasses.dataclass
class Loss:
    """A worker the pool lost: ``physical`` is torch's worker id."""

    physical: int
    pid: int | None
    cause: str
    stalled: bool = False
    stack: str = ""


@dataclasses.dataclass
class Restart:
    """One replacement of the worker pool, as logged and as ``loader.stats()`` reports it."""

    number: int
    at: str  # UTC, ISO 8601
    rank: int
    worker: int  # the lost worker's logical id (the one in states and messages)
    pid: int | None
    cause: str
    stack: str
    remade_batches: int  # asked of the lost pool, not received by the trainer: made again
    refetched_samples: int  # held in the restored buffers: fetched again by key
    seconds: float | None = None  # from noticing the loss to the next batch received

    def line(self) -> str:
        frames = [f.strip() for f in self.stack.splitlines() if f.strip().startswith("File ")]
        where = frames[0] if frames else ""  # the innermost frame (most recent call first)
        return (
            f"restart {self.number} at {self.at}: rank {self.rank} worker {self.worker} "
            f"(pid {self.pid}) {self.cause}{f' at {where}' if where else ''}; "
            f"{self.remade_batches} batches made again, {self.refetched_samples} buffered "
            "samples fetched again"
        )


def describe_exit(exitcode: int | None) -> str:
    """``"killed by signal 9 (SIGKILL)"``, ``"exited with code 3"``."""
    if exitcode is None:
        return "is gone (no exit status)"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-exitcode} ({name})"
    return f"exited with code {exitcode}"


class Healer:
    """A loader's restart budget and its record of restarts (kept across passes)."""

    def __init__(
        self,
        max_restarts: int | None,
        window_s: float,
        on_timeout: str,
        track_state: bool,
        timeout_s: float | None,
    ) -> None:
        if max_restarts is None:
            max_restarts = DEFAULT_MAX_RESTARTS if track_state else 0
        if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
            raise ConfigError(f"max_worker_restarts={max_restarts!r} must be an integer >= 0")
        if max_restarts and not track_state:
            raise ConfigError(
                f"get_loader(max_worker_restarts={max_restarts}): a loader without state "
                "cannot continue its stream after losing a worker; use get_savable_loader()"
            )
        if not isinstance(window_s, (int, float)) or isinstance(window_s, bool) or window_s <= 0:
            raise ConfigError(f"worker_restart_window_seconds={window_s!r} must be > 0")
        if on_timeout not in ("raise", "restart"):
            raise ConfigError(f"on_timeout={on_timeout!r}: use 'raise' or 'restart'")
        if on_timeout == "restart" and (timeout_s is None or not max_restarts):
            raise ConfigError(
                f"on_timeout='restart' needs timeout_seconds (got {timeout_s}) and "
                f"max_worker_restarts >= 1 (got {max_restarts})"
            )
        self.max_restarts, self.window_s = max_restarts, float(window_s)
        self.restart_on_timeout = on_timeout == "restart"
        self.restarts: list[Restart] = []
        self._times: collections.deque[float] = collections.deque()
        self._pending: tuple[Restart, float] | None = None
        self._stack_dir: str | None = None

    @property
    def enabled(self) -> bool:
        return self.max_restarts > 0

    def worker_init(self) -> Callable[[int], None] | None:
        """torch's ``worker_init_fn``: arms the stack dump that a stall restart and a late
        batch's notice (:meth:`notice_late`) read."""
        if not self.enabled:
            return None
        if self._stack_dir is None:
            self._stack_dir = tempfile.mkdtemp(prefix="energon_lite-stacks-")
            weakref.finalize(self, shutil.rmtree, self._stack_dir, True)
        return functools.partial(arm_stack_dump, self._stack_dir)

    def admit(
        self,
        loss: Loss,
        batches: Any,
        rank: int,
        rotation: int,
        states: list[Any],
        timeout_s: float | None,
    ) -> None:
        """Record a restart of pool ``batches`` (torch's worker 0 is logical ``rotation``)
        and log it, killing a stalled worker; or raise: a stall not to be restarted, or a
        loss past the budget (naming every restart)."""
        worker = (loss.physical + rotation) % len(states)
        if loss.stalled and not self.restart_on_timeout:
            raise timeout_error(rank, worker, timeout_s)
        remade = in_flight(batches)
        now = time.monotonic()
        while self._times and now - self._times[0] > self.window_s:
            self._times.popleft()
        if loss.stalled and not loss.stack and self._stack_dir is not None and loss.pid:
            loss.stack = dump_stack(loss.pid, self._stack_dir)
        restart = Restart(
            number=len(self.restarts) + 1,
            at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            rank=rank,
            worker=worker,
            pid=loss.pid,
            cause=loss.cause,
            stack=loss.stack,
            remade_batches=remade,
            refetched_samples=buffered_samples(states),
        )
        reason = _unsavable(states)
        if reason is not None or len(self._times) >= self.max_restarts:
            earlier = "".join(f"\n  {r.line()}" for r in self.restarts) or " none"
            why = (
                f"its state cannot be saved ({reason})"
                if reason is not None
                else f"that would be more than max_worker_restarts={self.max_restarts} within "
                f"worker_restart_window_seconds={self.window_s:g}"
            )
            raise WorkerRestartError(
                f"rank {rank}: worker {worker} (pid {loss.pid}) {loss.cause}; the loader "
                f"does not replace it: {why}. Restarts so far:{earlier}"
                + (f"\nThe stalled worker's stack:\n{loss.stack}" if loss.stack else "")
            )
        if loss.stalled:
            kill(batches, loss.physical)
        self._times.append(now)
        self.restarts.append(restart)
        self._pending = (restart, now)
        logger.warning(
            "%s; replacing the worker pool from the states of the batches received "
            "(restart %d of at most %d in %g s)%s",
            restart.line(),
            len(self._times),
            self.max_restarts,
            self.window_s,
            f"; the stalled worker's stack:\n{loss.stack}" if loss.stack else "",
        )

    def notice_late(self, rank: int, worker: int, pid: int | None, waited_s: float) -> None:
        """Log that the trainer has waited ``waited_s`` for worker ``worker``'s batch, with
        the worker's stacks. The worker's own watchdog logs where it is when it can, but not
        from native code that holds the interpreter lock (a library freeing threads the
        worker never had, a lock held at the fork): ``faulthandler`` still can."""
        stack = ""
        if pid is not None and self._stack_dir is not None:
            stack = dump_stack(pid, self._stack_dir)
        logger.warning(
            "rank %d: no batch from worker %d (pid %s) for %.0f s, and the process is alive (%s)%s",
            rank,
            worker,
            pid,
            waited_s,
            process_state(pid),
            f"; its stack:\n{stack}" if stack else "",
        )

    def received(self) -> None:
        """The trainer received a batch: the pending restart (if any) is complete."""
        if self._pending is not None:
            restart, since = self._pending
            restart.seconds = time.monotonic() - since
            self._pending = None

    def report(self) -> list[dict[str, Any]]:
        return [dataclasses.asdict(r) for r in self.restarts]


def timeout_error(rank: int, worker: int, timeout_s: float | None) -> WorkerTimeoutError:
    """A worker gave no batch within ``timeout_s`` and ``on_timeout`` is ``"raise"``."""
    return WorkerTimeoutError(
        f"rank {rank}: worker {worker} (logical id) timed out: no batch for "
        f"{timeout_s} s (fail_on_timeout); the worker's log shows its "
        "stage, sample key and stack"
    )


# torch's iterator ------------------------------------------------------------------------


def detach_signal_handler(batches: Any) -> None:
    """Stop torch's ``SIGCHLD`` handler from raising for these workers' deaths: it raises in
    the trainer's main thread wherever it is; :func:`next_or_loss` notices them instead."""
    if getattr(batches, "_worker_pids_set", False):
        torch_data_utils.signal_handling._remove_worker_pids(id(batches))
        batches._worker_pids_set = False


def next_or_loss(
    batches: Any,
    timeout_s: float | None,
    notice_s: float | None = None,
    late: Callable[[int, int | None, float], None] | None = None,
) -> tuple[Any, Loss | None]:
    """``(next item, None)``, or ``(None, loss)`` when a worker died or (``timeout_s``) the
    awaited one gave nothing for that long. ``StopIteration`` and workers' errors pass.
    After ``notice_s`` without the batch, ``late(torch's worker id, pid, seconds)`` is
    called once (the run goes on waiting)."""
    since = time.monotonic()
    noticed = False
    while True:
        left = _SLICE_S if timeout_s is None else timeout_s - (time.monotonic() - since)
        ready = _wait_ready(batches, max(0.0, min(_SLICE_S, left)))
        if ready == "ended":
            loss = lost_worker(batches, _EXIT_WAIT_S)
            if loss is not None:
                return None, loss
        if ready != "idle":
            try:
                return next(batches), None
            except StopIteration:
                raise
            except Exception as exc:
                # a batch whose worker died after sending it fails to arrive (its shared
                # memory went with the worker): a transport error, seen before the exit status
                patience = _EXIT_WAIT_S if isinstance(exc, (OSError, EOFError)) else 0.0
                loss = lost_worker(batches, patience)
                if loss is not None:
                    return None, loss
                if "DataLoader timed out" not in str(exc):
                    raise
        waited = time.monotonic() - since
        if late is not None and notice_s is not None and not noticed and waited >= notice_s:
            noticed = True
            physical, pid = _awaited_pid(batches)
            if physical is not None:
                late(physical, pid, waited)
        if timeout_s is not None and waited >= timeout_s:
            physical, pid = _awaited_pid(batches)
            return None, Loss(
                physical if physical is not None else 0,
                pid,
                f"stalled: no batch for {waited:.1f} s (timeout_seconds={timeout_s:g})",
                stalled=True,
            )


def _awaited_pid(batches: Any) -> tuple[int | None, int | None]:
    """(torch's id of the worker whose batch is awaited, its pid); None where unknown."""
    physical = awaited_worker(batches)
    workers = getattr(batches, "_workers", [])
    if physical is None or physical >= len(workers):
        return physical, None
    return physical, workers[physical].pid


def _wait_ready(batches: Any, slice_s: float) -> str:
    """Wait up to ``slice_s`` for the awaited batch to be readable or a worker to end:
    ``"ready"``, ``"ended"``, ``"idle"`` (neither), or ``"ask"`` (nothing to wait on here:
    a batch torch has already read, the pin-memory thread's queue; torch's own ``timeout``
    of :data:`POLL_S` bounds its wait then). One ``select`` and no exception per slice."""
    info = getattr(batches, "_task_info", {}).get(getattr(batches, "_rcvd_idx", None))
    reader = getattr(getattr(batches, "_data_queue", None), "_reader", None)
    if info is None or len(info) != 1 or reader is None or getattr(batches, "_pin_memory", True):
        return "ask"
    status = batches._workers_status
    if not status[info[0]]:  # its worker has ended: torch skips its task without reading
        return "ask"
    ends = [w.sentinel for i, w in enumerate(batches._workers) if status[i]]
    found = multiprocessing.connection.wait([reader, *ends], timeout=slice_s)
    if any(item is not reader for item in found):
        return "ended"
    return "ready" if found else "idle"


def lost_worker(batches: Any, patience: float = 0.0) -> Loss | None:
    """The first worker torch still expects batches from whose process is gone (looking
    again for ``patience`` seconds)."""
    status = getattr(batches, "_workers_status", [])
    deadline = time.monotonic() + patience
    while True:
        for physical, process in enumerate(getattr(batches, "_workers", [])):
            if not process.is_alive() and (status[physical] or process.exitcode):
                return Loss(physical, process.pid, describe_exit(process.exitcode))
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)


def awaited_worker(batches: Any) -> int | None:
    """torch's id of the worker whose batch the trainer waits for."""
    info = getattr(batches, "_task_info", {}).get(getattr(batches, "_rcvd_idx", -1))
    return info[0] if info else None


def in_flight(batches: Any) -> int:
    """Batches asked of the pool and not yet handed to the trainer."""
    return max(0, getattr(batches, "_send_idx", 0) - getattr(batches, "_rcvd_idx", 0))


def kill(batches: Any, physical: int) -> None:
    """SIGKILL a stalled worker: torch's shutdown would wait for it to finish its batch."""
    workers = getattr(batches, "_workers", [])
    if physical < len(workers) and workers[physical].is_alive():
        workers[physical].kill()
        workers[physical].join(timeout=torch_data_utils.MP_STATUS_CHECK_INTERVAL)


# stacks ---------------------------------------------------------------------------------


def arm_stack_dump(directory: str, worker_id: int) -> None:
    """In a worker: on ``SIGUSR1``, write every thread's stack to ``stack-<pid>.txt``."""
    path = os.path.join(directory, f"stack-{os.getpid()}.txt")
    _DUMP_FILE[:] = [open(path, "w")]  # noqa: SIM115 (faulthandler needs it open)
    faulthandler.register(signal.SIGUSR1, file=_DUMP_FILE[0], all_threads=True, chain=False)


def process_state(pid: int | None) -> str:
    """What the kernel says process ``pid`` is doing (Linux: its state and wait channel)."""
    if pid is None:
        return "pid unknown"
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/wchan") as f:
            channel = f.read().strip() or "-"
    except (OSError, IndexError):
        return "state unknown"
    names = {"R": "running", "S": "sleeping", "D": "in uninterruptible wait", "T": "stopped"}
    return f"{names.get(state, state)}, kernel wait {channel}"


def dump_stack(pid: int, directory: str, wait_s: float = _STACK_WAIT_S) -> str:
    """The stacks of worker ``pid`` (armed by :func:`arm_stack_dump`), or a note why not."""
    path = os.path.join(directory, f"stack-{pid}.txt")
    # each dump is appended to the worker's file (a late batch's notice may come before a
    # stall restart's): read only what this one writes
    start = os.path.getsize(path) if os.path.exists(path) else 0
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError as exc:
        return f"(no stack: {exc})"
    deadline, size = time.monotonic() + wait_s, -1
    while time.monotonic() < deadline:
        time.sleep(0.02)
        now = os.path.getsize(path) if os.path.exists(path) else 0
        if now > start and now == size:  # written and no longer growing
            break
        size = now
    try:
        with open(path) as f:
            f.seek(start)
            text = f.read()
    except OSError as exc:
        return f"(no stack: {exc})"
    if not text:
        return f"(no stack within {wait_s:g} s)"
    # the worker's main thread: the one running torch's worker loop (any thread may have
    # taken the signal; the watchdog's and the queues' threads are noise)
    blocks = text.strip().split("\n\n")
    return next((b for b in blocks if " in _worker_loop" in b), text.strip()) + "\n"


# states ---------------------------------------------------------------------------------


def buffered_samples(states: list[Any]) -> int:
    """Samples the restored chains' buffers fetch again (what ``checkpoint info`` counts)."""
    from energon_lite.resume.levels import walk_states
    from energon_lite.stages.base import stage_class
    from energon_lite.state.restore_key import from_plain, sample_keys

    total = 0
    for state in states:
        if not isinstance(state, dict):
            continue
        try:
            for level in walk_states(state):
                cls = stage_class(level.get("type"))
                if cls is not None:
                    total += sum(len(sample_keys(from_plain(k))) for k in cls.held_keys(level))
        except (StateError, KeyError, TypeError, AttributeError):
            continue  # a count for the log only
    return total


def _unsavable(states: list[Any]) -> str | None:
    from energon_lite.loader.savable_dataset import unsavable_reason

    return unsavable_reason(states)
