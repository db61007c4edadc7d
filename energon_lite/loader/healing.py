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
never watches these workers, from their pool's start on (:mod:`~energon_lite.loader.torch_iter`,
the one module that reads torch's pool).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import faulthandler
import functools
import os
import signal
import tempfile
import time
import weakref
from collections.abc import Callable
from typing import Any, BinaryIO

from energon_lite.errors import (
    ConfigError,
    StateError,
    WorkerRestartError,
    WorkerTimeoutError,
    logger,
)
from energon_lite.loader.torch_iter import WorkerPool

DEFAULT_MAX_RESTARTS = 3
DEFAULT_WINDOW_S = 3600.0
POLL_S = 0.25  # where torch reads its queue: the longest wait without a look at the workers
_SLICE_S = 1.0  # where the trainer waits on the queue and the workers: one select's longest
_STACK_WAIT_S = 2.0  # how long the trainer waits for a stalled worker's stack
_EXIT_WAIT_S = 2.0  # how long a transport error waits for a worker's exit status


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
    # from noticing the loss to the replacement pool's first batch (or, where it gave none,
    # to the end of its pass or its own loss); None only until one of these happens
    seconds: float | None = None

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
        # the stack files of the current pool's workers, by torch's worker id: unlinked, so
        # that they go with the last process holding them (a killed trainer leaves none)
        self._stack_files: list[BinaryIO] = []
        weakref.finalize(self, _close_all, self._stack_files)

    @property
    def enabled(self) -> bool:
        return self.max_restarts > 0

    def worker_init(self, num_workers: int) -> Callable[[int], None] | None:
        """torch's ``worker_init_fn`` for a new pool of ``num_workers``: arms the stack dump
        that a stall restart and a late batch's notice (:meth:`notice_late`) read."""
        if not self.enabled:
            return None
        _close_all(self._stack_files)  # the last pool's
        self._stack_files += [tempfile.TemporaryFile() for _ in range(num_workers)]  # noqa: SIM115 (kept open for the pool)
        return functools.partial(arm_stack_dump, [f.fileno() for f in self._stack_files])

    def _stack(self, physical: int, pid: int | None) -> str:
        if pid is None or physical >= len(self._stack_files):
            return ""
        return dump_stack(self._stack_files[physical].fileno(), pid)

    def admit(
        self,
        loss: Loss,
        pool: WorkerPool,
        rank: int,
        rotation: int,
        states: list[Any],
        timeout_s: float | None,
    ) -> None:
        """Record a restart of ``pool`` (torch's worker 0 is logical ``rotation``)
        and log it, killing a stalled worker; or raise: a stall not to be restarted, or a
        loss past the budget (naming every restart)."""
        worker = (loss.physical + rotation) % len(states)
        if loss.stalled and not self.restart_on_timeout:
            raise timeout_error(rank, worker, timeout_s)
        remade = pool.in_flight()
        now = time.monotonic()
        self.settle()  # a replacement pool lost before its first batch
        while self._times and now - self._times[0] > self.window_s:
            self._times.popleft()
        if loss.stalled and not loss.stack:
            loss.stack = self._stack(loss.physical, loss.pid)
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
            pool.kill(loss.physical)
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

    def notice_late(
        self, rank: int, worker: int, physical: int, pid: int | None, waited_s: float
    ) -> None:
        """Log that the trainer has waited ``waited_s`` for worker ``worker``'s batch, with
        the worker's stacks. The worker's own watchdog logs where it is when it can, but not
        from native code that holds the interpreter lock (a library freeing threads the
        worker never had, a lock held at the fork): ``faulthandler`` still can."""
        stack = self._stack(physical, pid)
        logger.warning(
            "rank %d: no batch from worker %d (pid %s) for %.0f s, and the process is alive (%s)%s",
            rank,
            worker,
            pid,
            waited_s,
            process_state(pid),
            f"; its stack:\n{stack}" if stack else "",
        )

    def settle(self) -> None:
        """The replacement pool gave its first batch, ended its pass or was lost in turn
        (or the trainer closed the stream): the pending restart (if any) is complete."""
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


# the pool ---------------------------------------------------------------------------------


def next_or_loss(
    pool: WorkerPool,
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
        ready = pool.wait(max(0.0, min(_SLICE_S, left)))
        if ready == "ended":
            loss = lost_worker(pool, _EXIT_WAIT_S)
            if loss is not None:
                return None, loss
        if ready != "idle":
            try:
                return next(pool), None
            except StopIteration:
                raise
            except Exception as exc:
                # a batch whose worker died after sending it fails to arrive (its shared
                # memory went with the worker): a transport error, seen before the exit status
                patience = _EXIT_WAIT_S if isinstance(exc, (OSError, EOFError)) else 0.0
                loss = lost_worker(pool, patience)
                if loss is not None:
                    return None, loss
                if "DataLoader timed out" not in str(exc):
                    raise
        waited = time.monotonic() - since
        if late is not None and notice_s is not None and not noticed and waited >= notice_s:
            noticed = True
            physical, pid = _awaited_pid(pool)
            if physical is not None:
                late(physical, pid, waited)
        if timeout_s is not None and waited >= timeout_s:
            physical, pid = _awaited_pid(pool)
            return None, Loss(
                physical if physical is not None else 0,
                pid,
                f"stalled: no batch for {waited:.1f} s (timeout_seconds={timeout_s:g})",
                stalled=True,
            )


def _awaited_pid(pool: WorkerPool) -> tuple[int | None, int | None]:
    """(torch's id of the worker whose batch is awaited, its pid); None where unknown."""
    physical = pool.awaited()
    processes = pool.processes
    if physical is None or physical >= len(processes):
        return physical, None
    return physical, processes[physical].pid


def lost_worker(pool: WorkerPool, patience: float = 0.0) -> Loss | None:
    """The first worker torch still expects batches from whose process is gone (looking
    again for ``patience`` seconds)."""
    deadline = time.monotonic() + patience
    while True:
        for physical, process in enumerate(pool.processes):
            if not process.is_alive() and (pool.expects(physical) or process.exitcode):
                return Loss(physical, process.pid, describe_exit(process.exitcode))
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)


# stacks ---------------------------------------------------------------------------------


def arm_stack_dump(fds: list[int], worker_id: int) -> None:
    """In worker ``worker_id``: on ``SIGUSR1``, append every thread's stack to ``fds[worker_id]``
    (a file the trainer opened before the fork)."""
    faulthandler.register(signal.SIGUSR1, file=fds[worker_id], all_threads=True, chain=False)


def _close_all(files: list[BinaryIO]) -> None:
    for f in files:
        f.close()
    files.clear()


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


def dump_stack(fd: int, pid: int, wait_s: float = _STACK_WAIT_S) -> str:
    """The stacks of worker ``pid``, which :func:`arm_stack_dump` armed to write to ``fd``,
    or a note why not."""
    # each dump is appended to the worker's file (a late batch's notice may come before a
    # stall restart's): read only what this one writes
    start = os.fstat(fd).st_size
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError as exc:
        return f"(no stack: {exc})"
    deadline, size = time.monotonic() + wait_s, -1
    while time.monotonic() < deadline:
        time.sleep(0.02)
        now = os.fstat(fd).st_size
        if now > start and now == size:  # written and no longer growing
            break
        size = now
    text = os.pread(fd, os.fstat(fd).st_size - start, start).decode(errors="replace")
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
