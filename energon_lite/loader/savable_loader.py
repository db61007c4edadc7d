"""``SavableLoader``: iterates a SavableDataset's batches and saves/restores its exact position.

Exact resume with workers: every worker chain yields ``(worker, batch, state_after_batch)``.
The loader hands the batch to the trainer and keeps, per worker, the state that belongs to
the last batch the trainer *received* (prefetched batches do not count), plus the next
worker to poll. ``save_state_rank()`` is that, with no command channel into the workers
and no replay. Restore checks the state's shape against the pipeline's declared shape (no
chain is built in the trainer), then each worker starts its chain from its state; the
logical worker ids rotate so that the torch DataLoader's first worker is the saved next one.
A worker pool that loses a worker is replaced the same way, from the states received so far
(:mod:`energon_lite.loader.healing`).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from energon_lite.errors import (
    ConfigError,
    StateError,
    UnsavableStateError,
)
from energon_lite.loader import healing
from energon_lite.loader.metrics import MetricsWindow, flat
from energon_lite.loader.savable_dataset import SavableDataset, modality, unsavable_reason
from energon_lite.loader.stateful import StatefulLoader
from energon_lite.loader.stats import LoaderStats
from energon_lite.loader.stream import StreamSettings, shut_down, stream
from energon_lite.loader.trace import DEFAULT_MAX_EVENTS, TraceBuffer
from energon_lite.resume.position import Position
from energon_lite.worker import WorkerSlot

if TYPE_CHECKING:  # a save or a restore loads them (and the elastic and relayout code below)
    from energon_lite.resume.ownership import LeafPlan
    from energon_lite.resume.target import RestoreTarget


class SavableLoader(StatefulLoader):
    """Iterates batches of a SavableDataset and can save/restore its exact position."""

    _next_id = 0  # Energon's loader ids (debug sample log), per class

    def __init__(
        self,
        dataset: SavableDataset,
        *,
        pin_memory: bool | None = None,
        prefetch_factor: int | None = 2,
        track_state: bool = True,
        timeout_seconds: float | None = None,
        watchdog_timeout_seconds: float | None = 60.0,
        watchdog_initial_timeout_seconds: float | None = None,
        stats: bool = False,
        reuse_batch_memory: bool = True,
        max_worker_restarts: int | None = None,
        worker_restart_window_seconds: float = healing.DEFAULT_WINDOW_S,
        on_timeout: str = "raise",
    ) -> None:
        if not isinstance(dataset, SavableDataset):
            raise ConfigError(
                f"expected a dataset from get_train_dataset/get_val_dataset, got {type(dataset).__name__}"
            )
        if timeout_seconds is not None and timeout_seconds <= 0:
            raise ConfigError(f"{timeout_seconds=} must be > 0 (or None: wait as long as it takes)")
        for name, value in (
            ("watchdog_timeout_seconds", watchdog_timeout_seconds),
            ("watchdog_initial_timeout_seconds", watchdog_initial_timeout_seconds),
        ):
            if value is not None and not value > 0:
                raise ConfigError(f"{name}={value!r} must be > 0 (or None: no watchdog)")
        self.timeout_seconds = timeout_seconds
        self.watchdog = (
            None
            if watchdog_timeout_seconds is None
            else (float(watchdog_timeout_seconds), watchdog_initial_timeout_seconds)
        )
        self.dataset = dataset
        self.worker_config = dataset.worker_config
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        self.pin_memory_setting = True if pin_memory is None else pin_memory
        self.prefetch_factor = prefetch_factor
        self.track_state = track_state
        # per worker the state of the last batch received, the next worker, the pass and the
        # batches handed out in it: what save_state_rank() saves (energon_lite/resume/)
        self._position = Position.start(self.worker_config.workers_per_rank)
        self._running: Generator[Any, None, None] | None = (
            None  # the live stream, kept across passes
        )
        self._stats = LoaderStats() if stats else None  # loader.stats()
        self._metrics = MetricsWindow()  # loader.metrics(): the last reading
        self.reuse_batch_memory = reuse_batch_memory
        # replacing lost workers (loader/healing.py); restarts are kept across passes
        self._healer = healing.Healer(
            max_worker_restarts,
            worker_restart_window_seconds,
            on_timeout,
            track_state,
            timeout_seconds,
        )
        self.id = self._take_id()
        self._global_sample_idx = 0  # batches handed out by this loader (debug log)
        if self.worker_config.should_log(level=1):
            self.worker_config.worker_log(
                {"t": "SavableLoader.__init__", "r": self.worker_config.rank, "w": None,
                 "id": self.id, "m": modality(dataset), "path": _paths(dataset),
                 "config": self.config()}
            )  # fmt: skip

    def _take_id(self) -> int:
        cls = type(self)
        taken = cls._next_id
        cls._next_id = taken + 1
        return taken

    def _iter_started(self) -> int:
        """Log the start of a stream (an epoch's pass); its ``iter_id``."""
        iter_id = self._take_id()
        wc = self.worker_config
        if wc.should_log(level=1):
            wc.worker_log(
                {"t": "SavableDataLoader.iter", "r": wc.rank, "w": None, "id": self.id,
                 "iter_id": iter_id}
            )  # fmt: skip
        return iter_id

    @property
    def virtual_epoch_length(self) -> int | None:
        return self.dataset.virtual_epoch_length

    def config(self) -> dict[str, Any]:
        """Energon's ``config()`` of its loader: the settings and the tree of wrapper datasets
        Energon builds for the same arguments (``dataset.energon_view()``), so that it
        compares equal with one Energon wrote; ``pin_memory`` is the setting asked for
        (Energon's loaders always ask; pinning happens where CUDA is available). What a saved
        state must match is ``loader.dataset.config()``."""
        workers = self.worker_config.num_workers
        return {
            "type": "SavableDataLoader" if self.track_state else "BasicDataLoader",
            "num_workers": workers,
            "persistent_workers": workers > 0,
            "pin_memory": self.pin_memory_setting,
            "prefetch_factor": None if workers == 0 else self.prefetch_factor,
            "dataset": self.dataset.energon_view().config(),
        }

    def __iter__(self) -> Iterator[Any]:
        """One pass: continues the stream where the last pass stopped (Energon's behaviour:
        ``islice(loader, n)`` twice gives the first 2n batches), up to
        ``virtual_epoch_length`` batches when that is set, else to the end of the epoch."""
        limit = self.virtual_epoch_length
        position = self._position
        while limit is None or position.in_pass < limit:
            if self._running is None:
                self._running = self._stream()
            try:
                batch = next(self._running)
            except StopIteration:
                self._running = None
                break
            self._position.in_pass += 1
            yield batch
        self._position.in_pass = 0

    def _stream(self) -> Generator[Any, None, None]:
        """Batches from the worker chains, from the saved states to the end of the epoch."""
        reason = unsavable_reason(self._position.workers)
        if reason is not None:  # closed mid-pass: there is no state to continue from
            raise UnsavableStateError(f"the loader cannot continue its pass: {reason}")
        running: list[Any] = []  # torch's worker pool, once the stream has made it
        batches = stream(weakref.proxy(self), self.dataset, self._stats, running)
        weakref.finalize(batches, shut_down, running)
        return batches

    # what the stream asks and tells (loader/stream.py, StreamOwner) -------------------

    @property
    def _settings(self) -> StreamSettings:
        return StreamSettings(
            self.pin_memory,
            self.prefetch_factor,
            self.timeout_seconds,
            self.watchdog,
            self.track_state,
            self.reuse_batch_memory,
            0 if self._stats is None or self._stats.trace is None else self._stats.trace.max_events,
        )

    def _resume_point(self) -> tuple[list[Any], int, int]:
        position = self._position
        return list(position.workers), position.next_worker, position.epoch

    def _received(self, logical: int, state: Any) -> int:
        self._position.received(logical, state)
        self._global_sample_idx += 1
        return self._global_sample_idx - 1

    def _epoch_ended(self) -> None:
        self._position.epoch_ended()

    def __len__(self) -> int:
        if self.virtual_epoch_length is not None:
            return self.virtual_epoch_length
        return self.dataset.pipeline.batches_per_epoch(self.worker_config, self._position.epoch)

    def stats(self) -> dict[str, Any]:
        """Where the loader's time goes, over the batches received so far: per-stage time and
        item counts, buffer fill, worker busy/idle, samples/s (``docs/performance.md``).
        Needs ``get_savable_loader(dataset, stats=True)`` (or ``get_loader``)."""
        if self._stats is None:
            raise ConfigError(
                "this loader was made without stats; pass stats=True to "
                "get_savable_loader()/get_loader() (overhead < 1%, see docs/performance.md)"
            )
        summary = {**self._stats.summary(), "worker_restarts": self.worker_restarts}
        mix = self.mix()
        if mix is not None:
            summary["mix"] = mix
        return summary

    def metrics(self) -> dict[str, float]:
        """The loader's figures since the last call, as ``{name: float}`` for any logger
        (``writer.add_scalar``, ``wandb.log``, Lightning's ``log_dict``): the trainer's wait,
        samples/s, each stage's share of the workers' time, each worker's busy fraction, buffer fill, shard
        cache and remote traffic, heals and the delivered mix. The names are listed in
        :mod:`energon_lite.loader.metrics` and ``docs/performance.md``. Needs ``stats=True``."""
        return flat(self._metrics.take(self.stats()))

    def execution_summary(self) -> str:
        """Each stage's CPU time and share so far, and one line naming the bottleneck (data or
        the training step; which stage) with what to try (:mod:`energon_lite.loader.summary`).
        Needs ``stats=True``."""
        from energon_lite.loader.summary import execution_summary

        return "\n".join(execution_summary(self.stats(), self.worker_config.num_workers))

    def start_trace(self, max_events: int = DEFAULT_MAX_EVENTS) -> None:
        """Keep a timeline of every worker's stage calls and the trainer's waits, for
        :meth:`write_trace` (:mod:`energon_lite.loader.trace`): at most ``max_events`` events
        per worker and for the trainer. Call it before the first batch (it turns ``stats``
        on); the workers start with it."""
        if self._running is not None:
            raise ConfigError(
                "start_trace(): call it before the first batch (the workers are running); or "
                "close() the loader first: its next pass continues with tracing"
            )
        if self._stats is None:
            self._stats = LoaderStats()
        self._stats.trace = TraceBuffer(self.worker_config.rank, max_events)

    def write_trace(self, path: str | os.PathLike[str]) -> Path:
        """Write the timeline so far as a Chrome/Perfetto trace-event JSON file (one per
        rank; ``merge_traces`` joins them). Needs :meth:`start_trace`."""
        if self._stats is None or self._stats.trace is None:
            raise ConfigError("write_trace(): this loader keeps no trace; call start_trace() first")
        with self._stats.locked():
            return self._stats.trace.write(path)

    @property
    def worker_restarts(self) -> list[dict[str, Any]]:
        """Each replacement of the worker pool so far (``max_worker_restarts``): when, which
        worker, why (exit code, signal, stall and stack), what was made or fetched again and
        how long until the next batch (``docs/resume.md``, "Workers that heal")."""
        return self._healer.report()

    def mix(self) -> dict[str, Any] | None:
        """The mix delivered so far: per blend source, samples and tokens against the target
        share at the current step (:mod:`energon_lite.loader.mix_report`); None without a
        weighted blend or before the first batch. ``stats()`` includes it as ``"mix"``."""
        from energon_lite.loader.mix_report import delivered_mix

        leaves = self.dataset.pipeline.leaves
        position = self._position
        states = [s for s in position.workers if isinstance(s, dict) and "unsavable" not in s]
        if not leaves or len(leaves) < 2 or not states:
            return None
        leaf_base = self.worker_config.slot(0).leaf_base
        return delivered_mix(states, leaves, position.in_pass, leaf_base)

    def can_restore_sample(self) -> bool:
        """Whether :meth:`restore_sample` works for this loader's pipeline (Energon's name)."""
        from energon_lite.loader.restore_sample import can_restore_sample

        return can_restore_sample(self.dataset)

    def restore_sample(self, restore_key: Any) -> Any:
        """The batch (or sample) with this ``__restore_key__``, made again in this process
        (Energon's name; for debugging a batch seen in training). A key of another dataset
        is a StateError naming it. See :mod:`energon_lite.loader.restore_sample`."""
        from energon_lite.loader.restore_sample import restore_sample

        return restore_sample(self.dataset, restore_key)

    def close(self) -> None:
        """Shut the worker processes down now instead of when the loader is garbage
        collected. A savable loader's next pass continues after the last batch received;
        a ``get_loader`` loader (no state) starts its epoch over."""
        self._stop_stream()

    def _stop_stream(self) -> None:
        if self._running is not None:
            self._running.close()  # shuts the workers down
            self._running = None

    # state ------------------------------------------------------------------------------

    def save_state_rank(self) -> dict[str, Any]:
        """This rank's loader state: plain data (msgpack-, pickle- and torch.save-able)."""
        if not self.track_state:
            raise StateError(
                "this loader was made with get_loader(); use get_savable_loader() to save state"
            )
        reason = unsavable_reason(self._position.workers)
        if reason is not None:
            raise UnsavableStateError(f"save_state_rank: {reason}")
        # where the datasets were read from, for messages only: a state restores into a copy
        # elsewhere (the config identifies datasets by content)
        return self._position.rank_state(self.dataset.config(), self._dataset_paths()).saved()

    def _dataset_paths(self) -> list[str]:
        leaves = self.dataset.pipeline.leaves
        return [f"{leaf.path} (split {leaf.split_part})" for leaf in leaves]

    def _target(self) -> RestoreTarget:
        """This loader, as what a saved state must match (:mod:`energon_lite.resume`)."""
        from energon_lite.resume.levels import StageClasses
        from energon_lite.resume.ownership import LeafPlan
        from energon_lite.resume.target import RestoreTarget

        wc = self.worker_config
        pipeline = self.dataset.pipeline

        def leaves() -> list[LeafPlan] | None:
            readers = pipeline.readers(wc.slot(0))  # None: a wrapper chain
            return None if readers is None else [LeafPlan.of(r) for r in readers]

        def fresh(slot: WorkerSlot) -> dict[str, Any]:
            chain = pipeline.build(slot)
            chain.restore_state(None)
            return chain.save_state()

        return RestoreTarget(
            worker_config=wc,
            config=self.dataset.config(),
            shape=pipeline.state_shape,
            paths=self._dataset_paths(),
            stages=StageClasses(
                {node.cls.__name__: node.cls for node in pipeline.plan(wc.slot(0)).nodes()}
            ),
            batches_per_pass=self.virtual_epoch_length,
            canonical=pipeline.canonical(wc.slot(0)),
            leaves=leaves,
            readers=lambda: pipeline.readers(wc.slot(0)),
            fresh=fresh,
        )

    def _check_owned(self, workers: list[Any]) -> None:
        """The worker states received so far own their work once (before healing restarts
        workers from them), checked as every restore checks a rank."""
        from energon_lite.resume.restore import check_owned

        position = Position(workers, self._position.next_worker, self._position.epoch)
        check_owned(position.rank_state(self.dataset.config()), self._target())

    def _continue_at(self, position: Position) -> None:
        """Continue at a checked ``position``. A pass that is running continues from there
        too: its next batch is the restored stream's first."""
        self._stop_stream()
        self._position = position

    def restore_state_rank(self, state: dict[str, Any] | None) -> None:
        """Continue from ``state`` (from ``save_state_rank``). A pass that is running continues
        from the restored position too: its next batch is the restored stream's first."""
        if state is None:
            self._continue_at(Position.start(self.worker_config.workers_per_rank))
        else:
            from energon_lite.resume.restore import restore_rank

            self._continue_at(restore_rank(state, self._target()))

    def save_state_global(self, global_dst_rank: int = 0) -> list[dict[str, Any]] | None:
        """Gather every rank's state on ``global_dst_rank`` (None on the other ranks)."""
        import torch.distributed as dist

        state = self.save_state_rank()
        if not (dist.is_available() and dist.is_initialized()):
            return [state]
        group = self.worker_config.data_parallel_group
        gathered: list[Any] | None = (
            [None] * dist.get_world_size(group) if dist.get_rank() == global_dst_rank else None
        )
        dist.gather_object(state, gathered, dst=global_dst_rank, group=group)
        return gathered

    def restore_state_global(
        self, states: list[dict[str, Any]] | None, *, src_rank: int | None = None
    ) -> None:
        """Restore every rank: each rank passes the full list, or only ``src_rank`` does.

        States saved with another number of ranks or workers are redistributed over this
        layout (:func:`energon_lite.resume.elastic.redistribute`): the rest of their epoch is
        delivered exactly once, then later epochs are partitioned over this layout."""
        from energon_lite.resume.restore import restore_global

        position = restore_global(states, self._target(), src_rank)
        self._stop_stream()  # a running pass continues from the restored position
        self._position = position


def _paths(dataset: SavableDataset) -> str:
    """The dataset paths of ``dataset`` (for the debug log), comma-separated."""
    return ",".join(str(leaf.path) for leaf in dataset.pipeline.leaves) or "?"
