"""One pass of a :class:`~energon_lite.loader.savable_loader.SavableLoader`: torch's worker
pool over the worker chains, from the states received so far to the end of the epoch.

The stream and its loader talk through :class:`StreamOwner`: the stream reads where to start
(:meth:`StreamOwner._resume_point`) and tells the loader each batch it hands out
(:meth:`StreamOwner._received`) and the end of the epoch (:meth:`StreamOwner._epoch_ended`);
the loader alone changes its position. A worker pool that loses a worker is replaced from the
states received so far (:mod:`energon_lite.loader.healing`); torch's pool is reached only
through :mod:`energon_lite.loader.torch_iter`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from torch.utils.data import DataLoader, IterableDataset

from energon_lite.fork_hook import parents_objects_kept_from_children
from energon_lite.loader import healing
from energon_lite.loader.savable_dataset import SavableDataset
from energon_lite.loader.stats import LoaderStats
from energon_lite.loader.torch_iter import WorkerPool
from energon_lite.sample_utils import default_get_batch_keys

if TYPE_CHECKING:  # the pool's shared-memory machinery loads only with a loader that uses it
    from energon_lite.batching.memory import BatchMemoryPool


@dataclasses.dataclass(frozen=True)
class StreamSettings:
    """A loader's settings that shape its stream."""

    pin_memory: bool
    prefetch_factor: int | None
    timeout_seconds: float | None
    watchdog: tuple[float, float | None] | None  # the workers' (timeout, initial timeout)
    track_state: bool
    reuse_batch_memory: bool
    trace_events: int = 0  # the stats probe keeps stage calls as events (loader/trace.py)


class StreamOwner(Protocol):
    """What a stream asks of its loader, and all it tells it (the loader's members for its
    stream: private to the package, not a user's API)."""

    @property
    def id(self) -> int:
        """The loader's id in Energon's debug sample log."""
        ...

    @property
    def _settings(self) -> StreamSettings: ...

    @property
    def _healer(self) -> healing.Healer: ...

    def _resume_point(self) -> tuple[list[Any], int, int]:
        """(per worker, the state of the last batch received; the next worker; the epoch)."""
        ...

    def _check_owned(self, workers: list[Any]) -> None:
        """StateError unless the worker states together own their work once."""
        ...

    def _iter_started(self) -> int:
        """A pass starts: its ``iter_id`` in the debug sample log."""
        ...

    def _received(self, logical: int, state: Any) -> int:
        """The trainer gets the batch worker ``logical`` sent with ``state``; its index
        among the batches the loader handed out (the debug sample log's ``global_idx``)."""
        ...

    def _epoch_ended(self) -> None:
        """Every worker ran out of its epoch (finite datasets): the next pass starts the
        next epoch."""
        ...


def _batch_memory_pool(num_workers: int, slots: int) -> BatchMemoryPool:
    from energon_lite.batching.memory import BatchMemoryPool

    return BatchMemoryPool(num_workers, slots)


class _StatefulView(IterableDataset):
    def __init__(
        self,
        dataset: SavableDataset,
        states: list[Any],
        rotation: int,
        epoch: int,
        save: bool,
        watchdog: tuple[float, float | None] | None,
        stats: bool = False,
        memory: BatchMemoryPool | None = None,
        trace_events: int = 0,
    ) -> None:
        super().__init__()
        self.dataset, self.states, self.rotation = dataset, states, rotation
        self.epoch, self.save, self.watchdog = epoch, save, watchdog
        self.stats, self.memory, self.trace_events = stats, memory, trace_events

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return self.dataset.iter_with_state(
            self.states,
            self.rotation,
            self.epoch,
            self.save,
            self.watchdog,
            self.stats,
            self.memory,
            self.trace_events,
        )


def _identity(item: Any) -> Any:
    return item


def shut_down(running: list[WorkerPool]) -> None:
    """Shut down the worker pools in ``running`` (if the stream made one)."""
    for pool in running:
        pool.close()
    running.clear()


def stream(
    owner: StreamOwner,
    dataset: SavableDataset,
    stats: LoaderStats | None,
    running: list[WorkerPool],
) -> Generator[Any, None, None]:
    """The live stream of one pass.

    Shutting workers down needs torch's iterator *and its queues* intact. The generator
    holds the loader only through the weak proxy it is given, so a loader the trainer drops
    is freed at once by reference counting. A loader caught in someone's reference cycle is
    freed by the garbage collector, which finalises everything in the cycle's garbage in no
    set order; a queue finalised first would make torch's shutdown wait out its join timeout
    (5 s per worker). So the pool is kept in ``running``, which a ``weakref.finalize`` on
    this generator holds: it is never part of the garbage, and the finalizer shuts it down.
    """
    wc = dataset.worker_config
    settings = owner._settings
    # a script that exits with the loader open finalizes this generator after the module's
    # globals are gone (None): what its exit path calls is bound here, while they are not
    release = shut_down
    healer = owner._healer if wc.num_workers > 0 and owner._healer.enabled else None
    timeout = settings.timeout_seconds
    pools: list[BatchMemoryPool | None] = []  # replaced pools stay: batches held may use them
    # healing waits in short slices, to notice a dead worker (healing.py)
    wait = healing.POLL_S if healer is not None else timeout if wc.num_workers > 0 else None
    n = wc.workers_per_rank

    def start() -> tuple[Any, int]:
        """torch's iterator over worker chains restored from the states received so far,
        and the logical id of its worker 0."""
        states, rotation, epoch = owner._resume_point()
        # batch buffers the workers reuse once this process has let go of them: one per batch
        # a worker may have queued (prefetch_factor), the one the trainer holds, the one in making
        pools.append(
            _batch_memory_pool(wc.num_workers, (settings.prefetch_factor or 2) + 2)
            if wc.num_workers > 0 and settings.reuse_batch_memory
            else None
        )
        view = _StatefulView(
            dataset,
            states,
            rotation,
            epoch,
            settings.track_state,
            settings.watchdog,
            stats is not None,
            pools[-1],
            settings.trace_events,
        )
        torch_loader = DataLoader(
            view,
            batch_size=None,
            num_workers=wc.num_workers,
            collate_fn=_identity,
            pin_memory=settings.pin_memory,
            prefetch_factor=settings.prefetch_factor if wc.num_workers > 0 else None,
            persistent_workers=False,
            timeout=wait or 0,
            worker_init_fn=None if healer is None else healer.worker_init(wc.num_workers),
        )
        batches: Any
        if wc.num_workers > 0:
            batches = WorkerPool(torch_loader, watched=healer is None)
            running.append(batches)
        else:
            with parents_objects_kept_from_children():
                batches = iter(torch_loader)
        if stats is not None:
            stats.begin_stream()
        return batches, rotation

    batches, rotation = start()
    # a batch later than the workers' watchdog timeout (a pool's first batch: its initial
    # timeout) is logged with its worker's stack
    notices: tuple[float | None, float | None] = (None, None)
    if settings.watchdog is not None:
        watch_s, first_s = settings.watchdog
        notices = (first_s if first_s is not None else 2 * watch_s, watch_s)
    notice = notices[0]

    def late(physical: int, pid: int | None, waited: float) -> None:
        assert healer is not None
        healer.notice_late(wc.rank, (physical + rotation) % n, physical, pid, waited)

    logging = wc.should_log(level=1)  # Energon's debug sample log (WorkerConfig.worker_log)
    iter_id, sample_idx, worker_idx = owner._iter_started(), 0, [0] * n
    try:
        while True:
            asked = time.perf_counter_ns()
            try:
                if healer is None:
                    item = next(batches)
                else:
                    item, loss = healing.next_or_loss(batches, timeout, notice, late)
                    if loss is not None:  # raises, or records a restart and lets it happen:
                        healer.admit(
                            loss, batches, wc.rank, rotation, owner._resume_point()[0], timeout
                        )
                        shut_down(running)
                        owner._check_owned(owner._resume_point()[0])  # as a restore does
                        batches, rotation = start()
                        notice = notices[0]
                        continue
                    healer.settle()
                    notice = notices[1]
                logical, batch, state, *extra = item
                got = time.perf_counter_ns()
            except StopIteration:
                break
            except RuntimeError as exc:
                if healer is not None or "timed out" not in str(exc):
                    raise
                raise healing.timeout_error(wc.rank, owner._resume_point()[1], timeout) from exc
            memory = pools[-1]
            if memory is not None:
                memory.received(batch, extra.pop())
            global_idx = owner._received(logical, state)
            if stats is not None:
                stats.received(extra[0] if extra else None, time.perf_counter_ns() - asked, got)
            if logging:
                keys = default_get_batch_keys(batch)
                wc.worker_log(
                    {
                        "t": "SavableDataLoader.yield",
                        "r": wc.rank,
                        "w": None,
                        "id": owner.id,
                        "iter_id": iter_id,
                        "worker_id": logical,
                        "worker_idx": worker_idx[logical],
                        "idx": sample_idx,
                        "iter_idx": sample_idx,
                        "global_idx": global_idx,
                        **({} if keys is None else {"keys": keys}),
                    }
                )
            worker_idx[logical] += 1
            sample_idx += 1
            yield batch
    except BaseException:
        # an error's traceback keeps torch's iterator alive (its frames hold it): shut the
        # workers down now rather than whenever the traceback is dropped
        if healer is not None:
            healer.settle()
        release(running)
        raise
    if healer is not None:
        healer.settle()  # a replacement pool that had nothing left to make
    shut_down(running)  # torch has shut the workers down: release its iterator
    if logging:
        wc.worker_log(
            {"t": "SavableDataLoader.StopIteration", "r": wc.rank, "w": None, "id": owner.id,
             "iter_id": iter_id}
        )  # fmt: skip
    owner._epoch_ended()
