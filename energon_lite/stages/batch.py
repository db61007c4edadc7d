"""``Batch``: groups ``batch_size`` consecutive items and collates them.

A batch is assembled inside one ``next()`` call, so between calls the stage holds nothing
but ``batches``, the count of batches made (``current_batch_index``, see ``hook_index.py``). The last, partial batch of a finite stream is emitted unless
``drop_last``. A collate function raising ``SkipSample`` drops that batch; any other error
is logged and the batch dropped, counted by the failure tracker.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from energon_lite.batching.slab import SlabScope
from energon_lite.errors import SKIPPED, ConfigError, FailureTracker, guarded
from energon_lite.samples.types import basic_sample_keys
from energon_lite.stages.base import Stage
from energon_lite.state.codec import state_count


def collate_or_skip(
    collate: Callable[[list[Any]], Any], items: list[Any], failures: FailureTracker
) -> Any:
    """``collate(items)``, or ``SKIPPED`` if it raised SkipSample or failed (logged and counted)."""
    return guarded(failures, "batch", _where, collate, items)


def fetch_batch(source: Stage, collate: Callable[[list[Any]], Any], restore_key: Any) -> Any:
    """A batch again from its ``__restore_key__`` (the list of its items' keys); a single
    item's key gives that item as it entered the batcher (``restore_sample``)."""
    if isinstance(restore_key, list):
        return collate([source.fetch(key) for key in restore_key])
    return source.fetch(restore_key)


def _where(items: list[Any]) -> dict[str, Any]:
    return {"keys": [basic_sample_keys(item)["__key__"] for item in items]}


class Batch(Stage):
    STATE_KEYS = ("batches",)
    ELASTIC_FRESH = {"batches": 0}  # the hook index starts over on another layout
    STATS_LABEL = "batch"
    STATS_HINT = (
        "batching is {percent}%: stacking copies every byte of the batch (into shared "
        "memory with workers), so uint8 images "
        '(SampleDecoder(image_decode="torchrgb8")) copy a quarter of float ones; keep '
        "per-sample Python work out of batch(); or {more_workers}"
    )
    STATS_BATCHES = True
    source: Stage  # always set: this stage has one parent

    def __init__(
        self,
        source: Stage,
        batch_size: int,
        collate: Callable[[list[Any]], Any],
        drop_last: bool = False,
        failures: FailureTracker | None = None,
        slab: bool = True,
    ) -> None:
        if batch_size < 1:
            raise ConfigError(f"{batch_size=} must be >= 1 (or None for no batching)")
        self.source = source
        self.batch_size = batch_size
        self.collate = collate
        self.drop_last = drop_last
        self.failures = failures or FailureTracker(0)
        # slab=False: a part of a batch joined later, which decodes into the joined one's
        self._slabs: SlabScope | contextlib.nullcontext[None] = (
            SlabScope(batch_size) if slab else contextlib.nullcontext()
        )

    def next(self) -> Any:
        self._start_if_fresh()
        index = self.context.index
        while True:
            index.batch = index.sample = self._batches  # while its samples are encoded
            items = []
            with self._slabs:  # images decode straight into the batch (batch_slab.py)
                for _ in range(self.batch_size):
                    try:
                        items.append(self.source.next())
                    except StopIteration:
                        break
                if not items or (self.drop_last and len(items) < self.batch_size):
                    raise StopIteration
                index.batch = index.sample = self._batches
                batch = collate_or_skip(self.collate, items, self.failures)
            if batch is not SKIPPED:
                self._batches += 1  # the index stays this batch's for encode_batch
                return batch

    def fetch(self, restore_key: Any) -> Any:
        return fetch_batch(self.source, self.collate, restore_key)

    def _reset(self) -> None:
        self._batches = 0

    def _save(self) -> dict[str, Any]:
        return {"batches": self._batches}

    def _restore(self, state: dict[str, Any]) -> None:
        self._batches = state_count(state["batches"], "Batch batches")
