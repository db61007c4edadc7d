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

import pickle
import weakref
from collections.abc import Generator, Iterator
from typing import Any

import torch

from energon_lite.errors import (
    ConfigError,
    StateError,
    UnsavableStateError,
    short_repr,
)
from energon_lite.loader import healing
from energon_lite.loader.savable_dataset import SavableDataset, modality, unsavable_reason
from energon_lite.loader.state_delta import with_unchanged
from energon_lite.loader.stateful import StatefulLoader
from energon_lite.loader.stats import LoaderStats
from energon_lite.loader.stream import StreamSettings, shut_down, stream
from energon_lite.stages.base import stage_class
from energon_lite.state.codec import (
    STATE_VERSION,
    check_same_config,
    check_state_shape,
    state_digest,
)
from energon_lite.state.compact import packed, unpacked
from energon_lite.state.upgrade import upgrade_state


def _many_pipelines(level: dict[str, Any]) -> bool:
    """A saved level whose parents are a canonical layout's pipelines (``Phases``)."""
    cls = stage_class(level.get("type"))
    return cls is not None and cls.LAZY_SOURCES


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
        n = self.worker_config.workers_per_rank
        self._states: list[Any] = [None] * n
        self._next_worker = 0
        self._epoch = 0
        self._in_pass = 0  # batches handed out in the current (virtual) pass
        self._running: Generator[Any, None, None] | None = (
            None  # the live stream, kept across passes
        )
        self._stats = LoaderStats() if stats else None  # loader.stats()
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
        while limit is None or self._in_pass < limit:
            if self._running is None:
                self._running = self._stream()
            try:
                batch = next(self._running)
            except StopIteration:
                self._running = None
                break
            self._in_pass += 1
            yield batch
        self._in_pass = 0

    def _stream(self) -> Generator[Any, None, None]:
        """Batches from the worker chains, from the saved states to the end of the epoch."""
        reason = unsavable_reason(self._states)
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
        )

    def _resume_point(self) -> tuple[list[Any], int, int]:
        return list(self._states), self._next_worker, self._epoch

    def _received(self, logical: int, state: Any) -> int:
        self._states[logical] = with_unchanged(self._states[logical], state)
        self._next_worker = (logical + 1) % len(self._states)
        self._global_sample_idx += 1
        return self._global_sample_idx - 1

    def _epoch_ended(self) -> None:
        self._states = [None] * len(self._states)
        self._next_worker = 0
        self._epoch += 1

    def __len__(self) -> int:
        if self.virtual_epoch_length is not None:
            return self.virtual_epoch_length
        return self.dataset.pipeline.batches_per_epoch(self.worker_config, self._epoch)

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
        states = [s for s in self._states if isinstance(s, dict) and "unsavable" not in s]
        if not leaves or len(leaves) < 2 or not states:
            return None
        leaf_base = self.worker_config.slot(0).leaf_base
        return delivered_mix(states, leaves, self._in_pass, leaf_base)

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
        reason = unsavable_reason(self._states)
        if reason is not None:
            raise UnsavableStateError(f"save_state_rank: {reason}")
        state = {
            "type": "SavableLoader",
            "version": STATE_VERSION,
            "config": self.dataset.config(),
            "epoch": self._epoch,
            "next_worker": self._next_worker,
            "workers": list(self._states),
            "in_pass": self._in_pass,
            # where the datasets were read from, for messages only: a state restores into a
            # copy elsewhere (the config identifies datasets by content)
            "paths": self._dataset_paths(),
        }
        state["digest"] = state_digest(state)
        # the caller's own copy: the trainer's states share what did not change from one
        # batch to the next (loader/state_delta.py), so a caller that edits what it got must
        # not edit the states saved after it
        state = pickle.loads(pickle.dumps(state, pickle.HIGHEST_PROTOCOL))
        return packed(state, _many_pipelines)  # a canonical layout's pipelines, compact

    def _dataset_paths(self) -> list[str]:
        leaves = self.dataset.pipeline.leaves
        return [f"{leaf.path} (split {leaf.split_part})" for leaf in leaves]

    def _mismatch_hint(self, state: dict[str, Any]) -> str:
        """What to do about a state saved by another loader (a sentence, or "")."""
        saved, current = state.get("config"), self.dataset.config()
        if not isinstance(saved, dict):
            return ""
        hints = []
        if "datasets" in current and saved.get("datasets") != current["datasets"]:
            paths = state.get("paths")
            where = (
                ", ".join(str(p) for p in paths[:8])
                if isinstance(paths, list) and paths
                else "paths not recorded in this state"
            )
            hints.append(
                f"the state was saved reading {where}; this loader reads "
                f"{', '.join(self._dataset_paths())}, whose content differs"
            )
        if any(saved.get(k) != current.get(k) for k in ("num_workers", "world_size")):
            hints.append(
                "to resume on another number of ranks or workers, give every rank's state to "
                "loader.restore_state_global(states) (or run energon-lite checkpoint redist)"
            )
        return "".join(f". {hint[0].upper()}{hint[1:]}" for hint in hints)

    def restore_state_rank(self, state: dict[str, Any] | None) -> None:
        """Continue from ``state`` (from ``save_state_rank``). A pass that is running continues
        from the restored position too: its next batch is the restored stream's first."""
        n = self.worker_config.workers_per_rank
        self._stop_stream()
        if state is None:
            self._states, self._next_worker, self._epoch, self._in_pass = [None] * n, 0, 0, 0
            return
        if not isinstance(state, dict) or state.get("type") != "SavableLoader":
            raise StateError(f"not an energon_lite loader state: {short_repr(state)}")
        state = upgrade_state(unpacked(state))  # today's form, or StateError naming its version
        try:
            check_same_config(state.get("config"), self.dataset.config())
        except StateError as exc:
            raise StateError(f"{exc}{self._mismatch_hint(state)}") from None
        if state.get("digest") != state_digest(state):
            raise StateError(
                "loader state does not match its digest: it was edited or corrupted after "
                "save_state_rank(); refusing it rather than changing the data stream"
            )
        workers = state.get("workers")
        if not isinstance(workers, list) or len(workers) != n:
            raise StateError(
                f"loader state has {len(workers) if isinstance(workers, list) else 'no'} worker states, expected {n}"
            )
        next_worker = state.get("next_worker")
        if not isinstance(next_worker, int) or not 0 <= next_worker < n:
            raise StateError(f"loader state next_worker={next_worker!r} outside [0, {n})")
        epoch = state.get("epoch", 0)
        if not isinstance(epoch, int) or epoch < 0:
            raise StateError(f"loader state epoch={epoch!r} is not a pass number; it is corrupt")
        for worker, worker_state in enumerate(workers):
            if worker_state is not None:  # the shape now; the values when the worker restores
                slot = self.worker_config.slot(worker, epoch)
                check_state_shape(self.dataset.pipeline.state_shape(slot), worker_state)
        in_pass = state.get("in_pass")
        limit = self.virtual_epoch_length
        if not isinstance(in_pass, int) or in_pass < 0 or (limit is not None and in_pass > limit):
            raise StateError(f"loader state in_pass={short_repr(in_pass)} is not a batch count")
        self._check_owned(workers)  # every restore of a file ends here
        self._states = list(workers)
        self._next_worker = next_worker
        self._epoch = epoch
        self._in_pass = in_pass

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
        layout (:func:`energon_lite.stages.elastic.redistribute`): the rest of their epoch is
        delivered exactly once, then later epochs are partitioned over this layout."""
        import torch.distributed as dist

        rank = self.worker_config.rank
        if src_rank is not None and dist.is_available() and dist.is_initialized():
            group = self.worker_config.data_parallel_group
            received: list[Any] = [None]
            if dist.get_rank() == src_rank:  # another layout: src redistributes for all ranks
                states = self._for_this_layout(states)
            dist.scatter_object_list(
                received, states if dist.get_rank() == src_rank else None, src=src_rank, group=group
            )
            self.restore_state_rank(received[0])
            return
        states = self._for_this_layout(states)
        if states is None or len(states) != self.worker_config.world_size:
            raise StateError(
                f"restore_state_global needs one state per rank ({self.worker_config.world_size}), "
                f"got {None if states is None else len(states)}"
            )
        self.restore_state_rank(states[rank])

    def _for_this_layout(self, states: Any) -> Any:
        """``states`` as they are, or redistributed when they were saved with another
        number of ranks or workers (elastic resume, :mod:`energon_lite.stages.elastic`)."""
        from energon_lite.stages.elastic import check_ownership, redistribute, same_layout

        wc = self.worker_config
        if not isinstance(states, list) or not states:
            return states
        # today's form; a version not read is refused below, naming its rank
        states = [upgrade_state(unpacked(state), strict=False) for state in states]
        leaves = self._leaf_plans()
        from energon_lite.loader.canonical import relayout

        moved = relayout(states, self.dataset, leaves)  # a canonical layout's run
        if moved is not None:
            return moved
        if same_layout(states, wc.world_size, wc.num_workers):
            for state in states:  # a field nested too deep or too large is named first
                if isinstance(state, dict):
                    state_digest(state)
            if leaves is not None:  # each rank's own checks cannot see overlaps
                check_ownership(states, leaves)
            return states
        return redistribute(states, wc.world_size, wc.num_workers, self.dataset.config(), leaves)

    def _check_owned(self, workers: list[Any]) -> None:
        """StateError unless this rank's worker states together own their work once (no
        sample buffered twice, no slice open twice, every reader position inside the plan):
        before a restore, and before healing restarts workers from the states received."""
        from energon_lite.loader.canonical import pipeline_trees
        from energon_lite.stages.elastic import check_ownership

        wc = self.worker_config
        canonical = getattr(self.dataset.pipeline, "canonical", None)
        layout = canonical(wc.slot(0)) if canonical is not None else None
        if layout is not None:  # the rank's logical pipelines, each in its canonical place
            check_ownership(pipeline_trees(workers, wc, layout), self._leaf_plans())
            return
        check_ownership([{"config": {"rank": wc.rank}, "workers": workers}], self._leaf_plans())

    def _leaf_plans(self) -> list[Any] | None:
        """What the dataset says about each leaf's epoch (:class:`LeafPlan`), for the
        ownership checks; None for a chain composed by hand (a wrapper)."""
        from energon_lite.stages.elastic import LeafPlan

        readers = self.dataset.pipeline.readers(self.worker_config.slot(0))
        return None if readers is None else [LeafPlan.of(reader) for reader in readers]


def _paths(dataset: SavableDataset) -> str:
    """The dataset paths of ``dataset`` (for the debug log), comma-separated."""
    return ",".join(str(leaf.path) for leaf in dataset.pipeline.leaves) or "?"
