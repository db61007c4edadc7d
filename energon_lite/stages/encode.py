"""``Encode``: raw sample -> decoded, typed sample -> ``TaskEncoder.encode_sample``.

Per raw sample: pick the leaf dataset's factory (by the restore key's leaf), decode the
parts the factory needs, build the typed sample (or the crude dict, then cook it), attach
the leaf's subflavors, and call ``encode_sample`` (or ``preencode_sample`` when packing)
with the sample's derived generator in place. A sample that fails anywhere is logged with
its key and shard and skipped; ``SkipSample`` skips silently. Deterministic for a given
restore key, so ``fetch`` re-encodes a buffered sample identically. The key of each output
is the one it was made from (``key_of``): a stage above keeps it beside a plain dict the
hook returned, which gets no ``__restore_key__`` entry written into it.

A hook may be a generator yielding several samples per input (Energon allows it): output
``n`` gets the restore key ``SubKey(input key, n)``, and ``fetch`` of such a key runs the
hook again and takes its ``n``-th output.

An output whose hook read ``current_batch_index`` / ``current_sample_index`` (or seeded
``restore_seeds`` from them) gets the restore key ``IndexKey(key, worker, batch, sample)``
with the values the hook saw, and ``fetch`` replays them (``hook_index.py``).

State: ``pending``: ``[]``, or the input key and the next output number while a generator
hook is part-way through its outputs (a restore re-runs it and skips what was handed out);
``calls``: inputs taken so far, the hook's ``current_sample_index`` (``hook_index.py``);
``seeds``: the hook-seeding form of the run, 2 (IndexKeys and Energon's ``restore_seeds``) or
1 (seeds from the restore key: what states saved before the field continue,
:mod:`energon_lite.state.upgrade`).
"""

from __future__ import annotations

import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from energon_lite.errors import SKIPPED, FailureTracker, StateError, guarded, short_repr
from energon_lite.samples.factory import LeafSpec
from energon_lite.stages.base import Stage
from energon_lite.state.codec import state_count
from energon_lite.state.restore_key import (
    IndexKey,
    RestoreKey,
    SampleKey,
    SubKey,
    from_plain,
    to_plain,
)
from energon_lite.task_encoder.base import TaskEncoder
from energon_lite.task_encoder.hook_index import SEEDS_BY_KEY, SEEDS_LATEST, HookIndex


class Encode(Stage):
    STATE_KEYS = ("pending", "calls", "seeds")
    STATS_LABEL = "decode"
    STATS_HINT = (
        "decode is {percent}%: decode images to uint8 "
        '(SampleDecoder(image_decode="torchrgb8")) and normalise on the GPU, or {more_workers}'
    )
    STATS_HOOK = "hook"  # the task encoder's encode_sample / preencode_sample
    ELASTIC_FRESH = {"pending": []}  # the hook index (calls) starts over too; seeds: kept
    source: Stage  # always set: this stage has one parent
    _outputs: Iterator[Any] | None  # the running generator hook
    _parent: RestoreKey | None
    _sub: int
    _seeds = SEEDS_LATEST  # until restored: the form a fresh run uses
    _indexed = False  # whether the running generator hook read an index
    _subject: Any  # what an error handler gets while a sample is encoded (None after)
    _key: RestoreKey | None = None  # the restore key of the output handed out last

    def __init__(
        self,
        source: Stage,
        leaves: Sequence[LeafSpec],
        task_encoder: TaskEncoder,
        seed: int,
        failures: FailureTracker,
        hook: str = "encode_sample",
        counts_batches: bool = False,
        leaf_base: int = 0,  # the leaf id of leaves[0] (datasets composed by a wrapper)
        worker: int = 0,  # the global worker id (restore_seeds' worker seed)
    ) -> None:
        self.source = source
        self.leaves = list(leaves)
        self.task_encoder = task_encoder
        self.seed = seed
        self.failures = failures
        self.hook = getattr(task_encoder, hook) if task_encoder.overrides(hook) else None
        self.cook = task_encoder.overrides("cook_crude_sample") or bool(task_encoder.cookers)
        self.counts_batches = counts_batches  # no batching stage: each sample is a "batch"
        self.leaf_base = leaf_base
        self.worker = worker

    @classmethod
    def elastic_state(cls, level: dict[str, Any], deal: Any) -> dict[str, Any]:
        return {"pending": [], "calls": 0, "seeds": level["seeds"]}  # the index starts over

    @classmethod
    def elastic_refusal(cls, level: dict[str, Any]) -> str | None:
        if not level["pending"]:
            return None
        return (
            "a generator encode_sample is part-way through its outputs for "
            f"{short_repr(level['pending'][0])}; an elastic restore cannot split them exactly. "
            "Save at a step where no generator hook is mid-way"
        )

    def encode(self, raw: dict[str, Any]) -> Any:
        restore_key: SampleKey = raw["__restore_key__"]
        index = restore_key.leaf - self.leaf_base
        if not 0 <= index < len(self.leaves):
            raise StateError(f"Encode: restore key {short_repr(restore_key)} names no leaf of mine")
        leaf = self.leaves[index]
        te = self.task_encoder
        te._set_sample_context(self.seed, restore_key)
        self._subject = raw  # what an error handler gets: the raw sample until it is built
        sample = self._subject = leaf.factory.build(raw, te.decoder, leaf.subflavors)
        if leaf.factory.crude and self.cook:
            sample = self._subject = te.cook_crude_sample(sample)
        if self.hook is not None:
            sample = self.hook(sample)
        return sample

    def next(self) -> Any:
        self._start_if_fresh()
        while True:
            if self._outputs is not None:
                out = self._next_output()
                if out is not SKIPPED:
                    return out
                continue
            raw = self.source.next()
            self.failures.saw()
            self._calls += 1
            self._set_index()
            sample = guarded(
                self.failures, "encode_sample", _where, self.encode, raw, subject=self._failed
            )
            # let go of it: a sample decoded into its batch's shared memory would keep that
            # memory busy until this stage's next sample (batching/memory.py), which under a
            # canonical layout comes a few batches later (each pipeline has its own Encode)
            self._subject = None
            if isinstance(sample, types.GeneratorType):
                self._outputs, self._parent, self._sub = sample, raw["__restore_key__"], 0
                self._indexed = self.context.index.read
                continue
            if sample is not SKIPPED:
                return self._indexed_output(sample, raw["__restore_key__"])

    def _set_index(self) -> None:
        """The hook's index: the input being encoded (a generator's outputs share it)."""
        index = self.context.index
        index.sample = self._calls - 1
        if self.counts_batches:
            index.batch = self._calls - 1
        self._hook_context(index)
        index.read = False

    def _hook_context(self, index: HookIndex) -> None:
        index.seeds, index.seed_offset = self._seeds, self.seed
        if self._seeds != SEEDS_BY_KEY:
            index.global_worker = self.worker

    def _indexed_output(self, out: Any, key: RestoreKey) -> Any:
        """``out`` with an IndexKey when its hook read an index (not in a seeds-1 run); the
        key is what ``key_of`` names for it."""
        index = self.context.index
        if index.read and self._seeds != SEEDS_BY_KEY:
            batch, sample = index.seen()
            key = IndexKey(key, self.worker, batch, sample)
            out = _with_restore_key(out, key)
        self._key = key
        return out

    def key_of(self, item: Any) -> RestoreKey | None:
        """The key of the output just handed out: the one this stage made it from, whether
        or not the hook's output carries it (a plain dict does not)."""
        return self._key

    def _failed(self) -> Any:
        """The sample an error handler is given: the typed sample the hook was called with."""
        return getattr(self, "_subject", None)

    def _next_output(self) -> Any:
        """The generator hook's next output with its SubKey; SKIPPED when it ended or failed."""
        assert self._outputs is not None and self._parent is not None
        self.task_encoder._set_sample_context(self.seed, self._parent)
        self._set_index()
        self.context.index.read = self._indexed  # the generator read an index at its start
        where = {"key": self._parent}
        out = guarded(
            self.failures,
            "encode_sample",
            lambda *_: where,
            next,
            self._outputs,
            _END,
            subject=self._failed,
        )
        if out is SKIPPED or isinstance(out, _Ended):
            self._outputs = self._parent = None
            return SKIPPED
        self._indexed = self.context.index.read
        key = SubKey(self._parent, self._sub)
        self._sub += 1
        return self._indexed_output(_with_restore_key(out, key), key)

    def fetch(self, restore_key: Any) -> Any:
        index = self.context.index
        self._hook_context(index)  # this chain's seeding form, also for a key without indices
        if isinstance(restore_key, IndexKey):
            with index.replay(restore_key.worker, restore_key.batch, restore_key.sample):
                out = self._fetch(restore_key.parent)
            return _with_restore_key(out, restore_key)
        with _unrecorded(index):  # a key of a seeds-1 state records no indices
            return self._fetch(restore_key)

    def _fetch(self, restore_key: Any) -> Any:
        if isinstance(restore_key, SubKey):
            outputs = self.encode(self.source.fetch(restore_key.parent))
            if not isinstance(outputs, types.GeneratorType):
                raise StateError(
                    f"Encode: {restore_key} names output {restore_key.sub} of a hook that is not a generator"
                )
            for number, out in enumerate(outputs):
                if number == restore_key.sub:
                    return _with_restore_key(out, restore_key)
            raise StateError(
                f"Encode: the hook yields fewer than {restore_key.sub + 1} outputs for {restore_key.parent}"
            )
        return self.encode(self.source.fetch(restore_key))

    def _reset(self) -> None:
        self._outputs, self._parent, self._sub = None, None, 0
        self._calls = 0
        self._indexed = False
        self._seeds = SEEDS_LATEST
        self._key = None

    def _save(self) -> dict[str, Any]:
        counters = {"calls": self._calls, "seeds": self._seeds}
        if self._outputs is None or self._parent is None:
            return {"pending": [], **counters}
        return {"pending": [to_plain(self._parent), self._sub], **counters}

    def _validate(self, state: dict[str, Any]) -> None:
        seeds = state["seeds"]
        if seeds not in (SEEDS_BY_KEY, SEEDS_LATEST) or isinstance(seeds, bool):
            raise StateError(
                f"Encode: seeds {short_repr(seeds)} is not {SEEDS_BY_KEY} or {SEEDS_LATEST}; "
                "the state was written by a newer energon_lite or is corrupt"
            )

    def _restore(self, state: dict[str, Any]) -> None:
        self._reset()
        self._calls = state_count(state["calls"], "Encode calls")
        self._seeds = state["seeds"]
        pending = state["pending"]
        if pending == []:
            return
        if not isinstance(pending, list) or len(pending) != 2:
            raise StateError(f"Encode: pending {short_repr(pending)} is not [key, output]")
        parent, sub = from_plain(pending[0]), state_count(pending[1], "Encode pending output")
        self._set_index()
        index = self.context.index
        # the batching stage above restores after this one; what the skipped outputs saw is
        # dropped with them
        with _unrecorded(index):
            outputs = self.encode(self.source.fetch(parent))
            if not isinstance(outputs, types.GeneratorType):
                raise StateError(
                    f"Encode: the state is part-way through a generator hook for {parent}, but the hook returned no generator"
                )
            for _ in range(sub):  # what was handed out before the state was saved
                if next(outputs, _END) is _END:
                    raise StateError(
                        f"Encode: the hook yields fewer than {sub} outputs for {parent}"
                    )
        self._indexed = index.read
        self._outputs, self._parent, self._sub = outputs, parent, sub


@contextmanager
def _unrecorded(index: HookIndex) -> Iterator[None]:
    """A hook made again where no index was recorded reads 0 for an index its chain has not
    set yet (before the batching stage has made a batch); put back to unset afterwards."""
    batch, sample = index.batch, index.sample
    index.batch, index.sample = batch or 0, sample or 0
    try:
        yield
    finally:
        if batch is None:
            index.batch = None
        if sample is None:
            index.sample = None


class _Ended:
    """What ``next(outputs, _END)`` gives when a generator hook has no more outputs."""


_END = _Ended()


def _with_restore_key(sample: Any, key: RestoreKey) -> Any:
    """``sample`` carrying ``key`` where it has the field: a dict only when it has the entry
    already (as Energon does; a stage above keeps the key beside a plain dict, ``key_of``)."""
    if isinstance(sample, dict):
        if "__restore_key__" in sample:
            sample["__restore_key__"] = key
    elif hasattr(sample, "__restore_key__"):
        sample.__restore_key__ = key
    return sample


def _where(raw: dict[str, Any]) -> dict[str, Any]:
    return {"key": raw.get("__key__"), "shard": raw.get("__shard__")}
