"""``GroupBatch``: per-bucket batching by ``batch_group_criterion(sample) -> (key, batch_size)``.

Algorithm: each sample goes to the buffer of its bucket key; a bucket is collated and
emitted (then forgotten) as soon as it holds its batch size, so every batch is homogeneous
in its key. At the end of a finite stream the partial buckets are emitted oldest first (the
order in which their current contents began) unless ``drop_last``. ``SkipSample`` from the
criterion drops the sample (e.g. "no shape bucket accepts it").

Synchronised mode (``BucketSync``): all data-parallel ranks emit the same bucket at the
same loader step. The loader polls a rank's ``n`` workers round robin, so worker ``w``'s
``k``-th batch is step ``k * n + w`` on every rank; its bucket is
``choose_bucket(seed, step, weights)``, and the worker pulls (and buffers the others) until
that bucket is full. The end of a finite stream is not synchronised: leftovers are emitted
as above. Keys with weight 0 are dropped (they would never be chosen); a key without a
weight is an error; more than ``max_buffered`` waiting samples means the weights do not
match the data, and is an error rather than a silent memory leak.

Each sample's restore key is the one the source names for it (``key_of``), kept beside it in
its bucket (a hook's plain dict carries none, and none is written into it).

State: the restore keys of each bucket's samples (at most ``sum(batch_size - 1)`` samples,
more in synchronised mode), and the count of emitted batches (the step counter). Bucket keys
are not saved: restore fetches the samples and asks the criterion again, so keys need not
survive msgpack (a ``BucketId`` would come back as a list).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from energon_lite.errors import (
    SKIPPED,
    ConfigError,
    FailureTracker,
    StateError,
    UnsavableStateError,
    guarded,
)
from energon_lite.samples.types import basic_sample_keys
from energon_lite.stages.base import Stage
from energon_lite.stages.batch import Batch, collate_or_skip, fetch_batch
from energon_lite.stages.bucket_sync import BucketSync, choose_bucket
from energon_lite.stages.buffer import check_held, fetch_kept, unsavable, warn_keyless
from energon_lite.state.codec import state_count
from energon_lite.state.restore_key import to_plain

if TYPE_CHECKING:
    from energon_lite.stages.elastic_deal import ElasticDeal


class GroupBatch(Stage):
    STATE_KEYS = ("buckets", "emitted", "sync")
    STATS_LABEL = Batch.STATS_LABEL
    STATS_HINT = Batch.STATS_HINT
    STATS_BATCHES = True
    source: Stage  # always set: this stage has one parent
    _source_done: bool
    _keyless: UnsavableStateError | None  # set when a keyless item enters a bucket
    _buckets: dict[Hashable, tuple[int, list[Any], list[Any]]]  # batch size, samples, plain keys

    def __init__(
        self,
        source: Stage,
        criterion: Callable[[Any], tuple[Hashable, int]],
        collate: Callable[[list[Any]], Any],
        drop_last: bool = False,
        failures: FailureTracker | None = None,
        sync: BucketSync | None = None,
        hook: str = "encode_sample",
    ) -> None:
        self.source = source
        self.hook = hook  # the hook whose outputs are grouped (named when one has no key)
        self.criterion = criterion
        self.collate = collate
        self.drop_last = drop_last
        self.failures = failures or FailureTracker(0)
        self.sync = sync

    def stats_held(self) -> tuple[int, int | None] | None:
        """The samples waiting in the buckets (no fixed capacity)."""
        if not self._started:
            return None
        return sum(len(waiting) for _, waiting, _ in self._buckets.values()), None

    @classmethod
    def held_keys(cls, level: dict[str, Any]) -> list[Any]:
        return [key for bucket in level["buckets"] for key in bucket]

    @classmethod
    def elastic_state(cls, level: dict[str, Any], deal: ElasticDeal) -> dict[str, Any]:
        """Empty buckets (their samples are dealt to the new readers), the same sync mode."""
        return {"buckets": [], "emitted": 0, "sync": level["sync"]}

    def next(self) -> Any:
        self._start_if_fresh()
        index = self.context.index
        while True:
            index.batch = index.sample = self._emitted  # current_batch_index (hook_index.py)
            target = None if self.sync is None else self._target(self.sync)
            full = self._fill(target)
            if full is None:
                if self.drop_last or not self._buckets:
                    raise StopIteration
                full = next(iter(self._buckets))
            batch_size, waiting, keys = self._buckets[full]
            # In synchronised mode a bucket may hold more than one batch while it waits.
            items, rest = waiting[:batch_size], waiting[batch_size:]
            if rest:
                self._buckets[full] = (batch_size, rest, keys[batch_size:])
            else:
                del self._buckets[full]
            index.batch = index.sample = self._emitted
            batch = collate_or_skip(self.collate, items, self.failures)
            if batch is SKIPPED:
                continue
            # Counted only when emitted: a dropped batch does not shift the step schedule.
            self._emitted += 1
            return batch

    def fetch(self, restore_key: Any) -> Any:
        return fetch_batch(self.source, self.collate, restore_key)

    def _target(self, sync: BucketSync) -> Hashable:
        step = self._emitted * sync.num_workers + sync.worker_id
        return choose_bucket(sync.seed, step, sync.weights)

    def _fill(self, target: Hashable | None) -> Hashable | None:
        """Pull until ``target`` (any bucket if None) is full; None at the end of the source."""
        if target is not None and self._is_full(target):
            return target
        while not self._source_done:
            try:
                sample = self.source.next()
            except StopIteration:
                self._source_done = True
                break
            known = self.source.key_of(sample)
            key = self._add(sample, None if known is None else to_plain(known))
            if key is not None and self._is_full(key) and target in (None, key):
                return key
        return None

    def _is_full(self, key: Hashable) -> bool:
        bucket = self._buckets.get(key)
        return bucket is not None and len(bucket[1]) >= bucket[0]

    def _add(self, sample: Any, plain_key: Any, strict: bool = False) -> Hashable | None:
        """Put ``sample`` in its bucket with its plain restore key (None where the source
        knows none); return the bucket key (None if dropped)."""
        if strict:  # a restore: a sample that had a bucket must get one again
            key, batch_size = self.criterion(sample)
        else:
            found = guarded(
                self.failures,
                "batch_group_criterion",
                basic_sample_keys,
                self.criterion,
                sample,
            )
            if found is SKIPPED:
                return None
            key, batch_size = found
        if self.sync is not None:
            weight = self.sync.weights.get(key)
            if weight is None:
                raise ConfigError(
                    f"batch_group_criterion returned bucket {key!r}, which has no weight in "
                    "bucket_sync['weights']; give it a weight (0 drops its samples)"
                )
            if weight == 0:
                return None
        bucket = self._buckets.setdefault(key, (batch_size, [], []))
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_group_criterion gave bucket {key!r} {batch_size=}; need >= 1")
        if bucket[0] != batch_size:
            raise ConfigError(
                f"batch_group_criterion gave bucket {key!r} batch sizes {bucket[0]} and "
                f"{batch_size}; one key must always have one batch size"
            )
        bucket[1].append(sample)
        bucket[2].append(plain_key)
        if self._keyless is None and plain_key is None:
            # trains as in Energon; saving is refused from now on (see KeyedBuffer)
            warn_keyless("GroupBatch", self.hook, sample)
            self._keyless = unsavable("GroupBatch", self.hook, sample)
        if self.sync is not None:
            waiting = sum(len(items) for _, items, _ in self._buckets.values())
            if waiting > self.sync.max_buffered:
                raise ConfigError(
                    f"bucket_sync: {waiting} samples wait in {len(self._buckets)} buckets "
                    f"(max_buffered={self.sync.max_buffered}); the weights do not match how "
                    "often the criterion yields each bucket (weights from counts / batch_size fit)"
                )
        return key

    def _reset(self) -> None:
        self._source_done = False
        self._buckets = {}
        self._emitted = 0
        self._keyless = None

    def _save(self) -> dict[str, Any]:
        if self._keyless is not None:
            raise self._keyless
        buckets = [list(keys) for _, _, keys in self._buckets.values()]
        return {"buckets": buckets, "emitted": self._emitted, "sync": self.sync is not None}

    def _validate(self, state: dict[str, Any]) -> None:
        if not isinstance(state["buckets"], list):
            raise StateError("GroupBatch: saved buckets must be a list; the state is corrupt")
        check_held("GroupBatch", state["buckets"], None)

    def _restore(self, state: dict[str, Any]) -> None:
        self._reset()
        if bool(state["sync"]) != (self.sync is not None):
            raise StateError(
                f"GroupBatch: state saved with bucket_sync {'on' if state['sync'] else 'off'}, "
                f"this loader has it {'on' if self.sync is not None else 'off'}"
            )
        self._emitted = state_count(state["emitted"], "GroupBatch emitted")
        for saved in state["buckets"]:
            before = len(self._buckets)
            samples, kept = fetch_kept(saved, self.source.fetch, "GroupBatch")
            found = {self._add(s, k, strict=True) for s, k in zip(samples, kept)}
            if len(found) != 1 or len(self._buckets) != before + 1:
                raise StateError(
                    f"GroupBatch: a saved bucket's samples now fall into buckets {found!r}; "
                    "batch_group_criterion must be a pure function of the sample"
                )
