"""``AggregatorPool`` (Energon's ``megatron.energon.flavors.webdataset.aggregator_pool``):
worker processes turn tasks into streams of items; one aggregator, in the calling process,
receives them in batches of at most ``batch_size`` and builds the result.

Workers are forked (they inherit the producer function and the pool), take tasks from a
queue until they are out, and send each task's items in batches (a task's last batch may be
short; batches never mix tasks). ``process()`` returns what the aggregator's
``get_final_result_data`` gives. A worker that dies is reported by its exit code rather than
waited for forever.
"""

from __future__ import annotations

import multiprocessing
import queue
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from energon_lite.fork_hook import parents_objects_kept_from_children

__all__ = ["AggregatorPool", "BaseAggregator"]

T_input_data = TypeVar("T_input_data")
T_aggregation_data = TypeVar("T_aggregation_data")
T_result = TypeVar("T_result")

_POLL_SECONDS = 1.0  # how often the aggregator checks that the workers are still alive


class BaseAggregator(ABC, Generic[T_aggregation_data, T_result]):
    """What the aggregator does: ``on_start``, ``on_item`` per batch, ``on_finish``, then
    ``get_final_result_data`` (None unless overridden)."""

    def on_start(self, aggregator_pool: AggregatorPool) -> None:
        """Before the first batch."""

    @abstractmethod
    def on_item(self, items: list[T_aggregation_data], aggregator_pool: AggregatorPool) -> None:
        """One batch of items from one worker."""

    def on_finish(self, aggregator_pool: AggregatorPool) -> None:
        """After every worker is done."""

    def get_final_result_data(self) -> T_result:
        """The result ``process()`` returns."""
        return None  # type: ignore[return-value]


class AggregatorPool(Generic[T_input_data, T_aggregation_data, T_result]):
    """``num_workers`` forked workers run ``user_produce_data(task)`` for the submitted tasks;
    ``aggregator`` gets their items in batches of up to ``batch_size``."""

    def __init__(
        self,
        num_workers: int,
        user_produce_data: Callable[[T_input_data], Iterable[Any]],
        aggregator: BaseAggregator[T_aggregation_data, T_result],
        *,
        batch_size: int = 1,
    ) -> None:
        if batch_size <= 0:
            raise ValueError(f"AggregatorPool: batch_size={batch_size} must be positive")
        if num_workers <= 0:
            raise ValueError(f"AggregatorPool: num_workers={num_workers} must be positive")
        self.num_workers = num_workers
        self.user_produce_data = user_produce_data
        self.aggregator = aggregator
        self.batch_size = batch_size
        self._context = multiprocessing.get_context("fork")
        self.task_queue: Any = self._context.Queue()
        self.result_queue: Any = self._context.Queue()

    def submit_task(self, task: T_input_data) -> None:
        """Queue ``task`` for a worker (before ``process()``)."""
        self.task_queue.put(task)

    def _worker(self) -> None:
        while (task := self.task_queue.get()) is not None:
            batch: list[Any] = []
            for item in self.user_produce_data(task):
                batch.append(item)
                if len(batch) >= self.batch_size:
                    self.result_queue.put(batch)
                    batch = []
            if batch:
                self.result_queue.put(batch)
        self.result_queue.put(None)  # this worker is done

    def process(self) -> T_result:
        """Run the workers and the aggregator; the aggregator's final data."""
        workers = [
            self._context.Process(target=self._worker, daemon=True) for _ in range(self.num_workers)
        ]
        with parents_objects_kept_from_children():
            for process in workers:
                process.start()
        for _ in workers:
            self.task_queue.put(None)
        try:
            self.aggregator.on_start(self)
            done = 0
            while done < len(workers):
                try:
                    batch = self.result_queue.get(timeout=_POLL_SECONDS)
                except queue.Empty:
                    dead = [p.exitcode for p in workers if p.exitcode not in (None, 0)]
                    if dead:
                        raise RuntimeError(
                            f"AggregatorPool: a worker exited with code {dead[0]} "
                            f"({self.user_produce_data!r} raised or was killed)"
                        ) from None
                    continue
                if batch is None:
                    done += 1
                else:
                    self.aggregator.on_item(batch, self)
            self.aggregator.on_finish(self)
            result = self.aggregator.get_final_result_data()
        except BaseException:
            for process in workers:
                if process.is_alive():
                    process.terminate()
            raise
        finally:
            for process in workers:
                process.join()
        return result
