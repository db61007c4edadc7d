"""``SavableDataset``: a pipeline plus the worker configuration, run inside each worker.

Every worker builds its own chain from the pipeline and yields
``(logical worker, batch, state after this batch)``; iterating the dataset directly yields
the batches alone (``get_train_dataset(...)`` used as a plain torch ``IterableDataset``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from torch.utils.data import IterableDataset, get_worker_info

from energon_lite.batching.sources import read_directly
from energon_lite.errors import ConfigError, UnsavableStateError, restoring
from energon_lite.loader.probe import ChainProbe
from energon_lite.loader.transport import (
    check_descriptors_travel,
    check_sendable,
    pickled_item,
)
from energon_lite.loader.watchdog import Watchdog
from energon_lite.pipeline.dataset_pipeline import DatasetPipeline, Pipeline
from energon_lite.resume.sent_state import StateSender
from energon_lite.sample_utils import default_get_batch_keys
from energon_lite.storage.cache_config import ShardCacheConfig
from energon_lite.storage.session import session
from energon_lite.worker import WorkerConfig

if TYPE_CHECKING:  # the pool's shared-memory machinery loads only with a loader that uses it
    from energon_lite.batching.memory import BatchMemoryPool
    from energon_lite.loader.energon_tree import TreeNode  # a view, loaded when one is asked


T_sample = TypeVar("T_sample", covariant=True)


class SavableDataset(IterableDataset[T_sample], Generic[T_sample]):
    """A pipeline plus the worker configuration; iterating it yields batches (no state)."""

    wrapper_depth = 0  # how many wrappers that draw random streams sit below this dataset

    def __init__(
        self,
        pipeline: Pipeline,
        worker_config: WorkerConfig,
        virtual_epoch_length: int | None = None,
        shard_cache: ShardCacheConfig | None = None,
    ) -> None:
        super().__init__()
        if virtual_epoch_length is not None and (
            isinstance(virtual_epoch_length, bool)
            or not isinstance(virtual_epoch_length, int)
            or virtual_epoch_length < 1
        ):
            raise ConfigError(f"{virtual_epoch_length=} must be an integer >= 1 (or None)")
        self.pipeline = pipeline
        self.worker_config = worker_config
        self.virtual_epoch_length = virtual_epoch_length
        self.shard_cache = shard_cache  # made this process's cache where the chain runs

    def __iter__(self) -> Iterator[Any]:
        return self.iter_with_state(None, 0, 0, save_states=False, batch_only=True)

    def iter_with_state(
        self,
        states: list[Any] | None,
        rotation: int,
        epoch: int,
        save_states: bool = True,
        watchdog: tuple[float, float | None] | None = None,
        stats: bool = False,
        memory: BatchMemoryPool | None = None,
        trace_events: int = 0,
        batch_only: bool = False,
    ) -> Iterator[Any]:
        """Run the chain of the calling worker; yield ``(logical worker, batch, state)``,
        plus a :class:`~energon_lite.loader.probe.ChainProbe` snapshot when ``stats``, plus
        the batch's :class:`~energon_lite.batching.memory.Held` segments when ``memory`` is
        given (in a worker process, batches are then built in that pool's segments).
        ``trace_events``: the probe also keeps up to that many stage calls as events
        (:mod:`energon_lite.loader.trace`). ``batch_only``: yield the batches alone (the
        dataset iterated as a plain torch ``IterableDataset``).

        In a worker process the state is sent as bytes, pickled apart from the batch
        (:mod:`energon_lite.resume.sent_state`: the trainer decodes it only when a save
        asks), and each item is yielded pickled once (:mod:`energon_lite.loader.transport`;
        a batch alone is test-pickled): an unpicklable batch raises here instead of hanging
        torch's queue. ``watchdog=(timeout, initial_timeout)`` (or the dataset's own,
        ``watch_settings``) starts a :class:`~energon_lite.loader.watchdog.Watchdog` that
        logs where a stalled worker (or, without workers, the loading thread) is.
        """
        # the chain reads through this dataset's shard cache while it runs (another loader of
        # this process, interleaved with it, reads through its own)
        reading = session().shard_cache(self.shard_cache)
        info = get_worker_info()
        physical = info.id if info is not None else 0
        n = self.worker_config.workers_per_rank
        logical = (physical + rotation) % n
        in_worker = info is not None
        watch = self.watch_settings(watchdog)
        dog = Watchdog(watch[0], logical, watch[1], watch[2]).start() if watch else None
        pool = memory if in_worker else None
        wc = self.worker_config
        logging = wc.should_log(level=1)  # Energon's debug sample log: each batch made
        mode = modality(self)
        step = 0
        # a worker sends each state pickled apart from its batch, as changes since the last
        send = StateSender() if in_worker and save_states else None
        if pool is not None:
            pool.activate(physical)
        try:
            if in_worker:
                check_descriptors_travel(logical)
                read_directly()  # a forked worker only sends batches (batching/sources.py)
            chain = self.pipeline.build(self.worker_config.slot(logical, epoch))
            probe = ChainProbe(chain, logical, trace_events) if stats else None
            context = chain.context
            context.index.worker, context.index.workers = logical, n  # the indices' spread
            with restoring(self.worker_config.restore_error_handler), reading:
                chain.restore_state(states[logical] if states is not None else None)
            while True:
                if probe is not None:
                    probe.resume()
                try:
                    with context.running(), reading:  # the hooks read this chain's indices
                        batch = chain.next()
                except StopIteration:
                    return
                if probe is not None:
                    probe.produced()
                if logging:
                    keys = default_get_batch_keys(batch)
                    wc.worker_log(
                        {"t": "yield_batch", "r": wc.rank, "w": wc.slot(logical).global_worker_id,
                         "m": mode, "idx": step, **({} if keys is None else {"keys": keys})}
                    )  # fmt: skip
                    step += 1
                if dog is not None:
                    dog.beat()
                state: Any = _save(chain) if save_states else None
                if send is not None:  # bytes the trainer decodes only when it reads them
                    state = send(state)
                extra: tuple[Any, ...] = () if probe is None else (probe.snapshot(),)
                if memory is not None:
                    extra += (
                        pool.collect() if pool is not None else memory.held_nothing(physical),
                    )
                item: Any = batch if batch_only else (logical, batch, state, *extra)
                if in_worker and batch_only:  # torch's queue pickles it: test it first
                    check_sendable(batch, logical)
                elif in_worker:  # pickled here, once: torch's queue copies the bytes
                    item = pickled_item(item, batch, logical)
                out = [item]
                del batch, item  # while suspended this frame holds no batch: a worker builds the
                if dog is not None:
                    # waiting for the trainer is not a stall of the loader: its step (no
                    # workers), or in a worker torch's wait for the next batch to be asked
                    dog.pause()
                yield out.pop()  # next one without keeping the last one sent (shared memory)
                if dog is not None:
                    dog.resume()
        finally:
            if dog is not None:
                dog.stop()

    def watch_settings(
        self, watchdog: tuple[float, float | None] | None
    ) -> tuple[float, float | None, Callable[[], Any] | None] | None:
        """The watchdog to run over this dataset's chain: the loader's ``(timeout,
        initial_timeout)`` and no callback (``WatchdogDataset`` brings its own)."""
        return None if watchdog is None else (watchdog[0], watchdog[1], None)

    def __len__(self) -> int:
        if self.virtual_epoch_length is not None:  # Energon's EpochizeDataset length
            return self.virtual_epoch_length
        return self.pipeline.batches_per_epoch(self.worker_config)

    def energon_view(self) -> TreeNode:
        """This dataset as the tree of wrapper datasets Energon builds for the same arguments
        (a read-only view, :mod:`energon_lite.loader.energon_tree`)."""
        from energon_lite.loader.energon_tree import TreeNode, energon_tree

        if isinstance(self.pipeline, DatasetPipeline):
            return energon_tree(self.pipeline, self.worker_config, self.virtual_epoch_length)
        return TreeNode(type(self).__name__, {"config": self.config()})

    @property
    def dataset(self) -> Any:
        """The node below this dataset's own in Energon's tree of wrapper datasets (for code
        that walks it: ``dataset.dataset.dataset``, a ``BlendDataset``'s ``dataset_weights``,
        a leaf's ``workers_slice_offsets``); a view, see :meth:`energon_view`."""
        below = getattr(self.energon_view(), "dataset", None)
        if below is None:
            raise AttributeError(f"{type(self).__name__} wraps no dataset in Energon's tree")
        return below

    def config(self) -> dict[str, Any]:
        """Everything a saved state must match (energon_lite's description; Energon's tree
        is ``energon_view().config()``, what ``loader.config()`` returns)."""
        wc = self.worker_config
        return {
            "rank": wc.rank,
            "world_size": wc.world_size,
            "num_workers": wc.num_workers,
            "seed": wc.seed_offset,
            "virtual_epoch_length": self.virtual_epoch_length,
            **self.pipeline.fingerprint(),
        }


def _save(chain: Any) -> dict[str, Any]:
    """The chain's state, or (a hook left items without ``__restore_key__``, which Energon
    trains with) ``{"unsavable": reason}``, which ``save_state_rank`` refuses with the reason."""
    try:
        return chain.save_state()
    except UnsavableStateError as exc:
        return {UNSAVABLE: str(exc)}


UNSAVABLE = "unsavable"


def unsavable_reason(states: list[Any]) -> str | None:
    """The reason a worker gave for having no state, if any worker did."""
    for state in states:
        if isinstance(state, dict) and UNSAVABLE in state:
            return str(state[UNSAVABLE])
    return None


def modality(dataset: SavableDataset) -> str:
    """``train`` or ``val`` (the debug sample log's ``m``): whether the pipeline trains."""
    return "train" if dataset.pipeline.training else "val"
