"""``Pack``: sequence packing over a buffer of pre-encoded samples.

Algorithm: fill a buffer with up to ``size`` samples from the source (``preencode_sample``
output), hand a copy to ``TaskEncoder.select_samples_to_pack(buffer) -> groups`` and queue
the groups. Each ``next()`` takes the oldest queued group, runs ``postencode_sample`` on each
member (with the member's sample generator, seeded from its restore key exactly as Encode
seeds ``preencode_sample``) and returns ``pack_selected_samples(members)``. The buffer is
refilled only when the queue is empty, so buffer + queue never hold more than ``size``.

Unlike Energon, which drops the samples its pre-packer leaves out, samples that no group
selects stay in the buffer for the next selection: a selector may keep short leftovers
back until they fit. A full buffer of which nothing is selected is an error (it would never
change); at the end of a finite source the last leftovers are selected once more, and
dropped with a warning if still unselected. ``SkipSample`` from the selector drops the
whole buffer (Energon's behaviour); from a postencode, that member; from the packer, the pack.

Each buffered sample's restore key is the one its source names for it (``key_of``), kept
beside it in the buffer and in the queued groups, never read from nor written into the
sample: a hook's plain dicts pack, save and restore like typed samples. The packed sample's
key is a :class:`~energon_lite.state.restore_key.PackKey` of its members' keys (in its
``__restore_key__`` where it has that field, and ``key_of`` for a stage above), so ``fetch``
rebuilds it: fetch each member, postencode, pack again.

State: the restore keys of the buffered samples and of the queued groups (``size`` keys at
most), nothing else. Restore fetches them again through the source.
"""

from __future__ import annotations

import types
from typing import Any

from energon_lite.errors import SKIPPED, ConfigError, FailureTracker, StateError, guarded, logger
from energon_lite.samples.types import basic_sample_keys
from energon_lite.stages.base import Stage
from energon_lite.stages.buffer import KeyedBuffer, check_held, fetch_kept
from energon_lite.state.restore_key import PackKey, RestoreKey, from_plain, to_plain
from energon_lite.task_encoder.base import TaskEncoder


class Pack(Stage):
    STATE_KEYS = ("buffer", "pending")
    DELTA_KEYS = ("buffer",)  # a batch changes a few of the buffer's keys
    STATS_LABEL = "pack"
    STATS_HINT = (
        "packing is {percent}%: a cheaper select_samples_to_pack or a smaller packing_buffer_size"
    )
    ELASTIC_FRESH = {"buffer": [], "pending": []}  # its samples are dealt to the new readers
    source: Stage  # always set: this stage has one parent
    _buffer: KeyedBuffer
    _pending: list[tuple[list[Any], list[Any]]]  # selected groups: (samples, plain keys)
    _key: RestoreKey | None = None  # the key of the pack handed out last

    def __init__(
        self,
        source: Stage,
        size: int,
        task_encoder: TaskEncoder,
        seed: int,
        failures: FailureTracker | None = None,
        hook: str = "encode_sample",
    ) -> None:
        if size < 1:
            raise ConfigError(f"{size=} for the packing buffer; set packing_buffer_size >= 1")
        self.source = source
        self.size = size
        self.task_encoder = task_encoder
        self.seed = seed
        self.failures = failures or FailureTracker(0)
        self.hook = hook  # the hook whose outputs are packed (named when one has no key)

    def stats_held(self) -> tuple[int, int | None] | None:
        """The buffer and the selected groups not yet packed."""
        if not self._started:
            return None
        return len(self._buffer) + sum(len(group) for group, _ in self._pending), self.size

    @classmethod
    def held_keys(cls, level: dict[str, Any]) -> list[Any]:
        """The buffer's keys, then those of the selected groups not yet packed."""
        return [*level["buffer"], *(key for group in level["pending"] for key in group)]

    def next(self) -> Any:
        self._start_if_fresh()
        while True:
            if not self._pending:
                self._select()
                continue
            packed = self._pack(*self._pending.pop(0), strict=False)
            if packed is not SKIPPED:
                return packed

    def key_of(self, item: Any) -> RestoreKey | None:
        return self._key

    def _select(self) -> None:
        """Refill the buffer and queue the selected groups; StopIteration when all is done."""
        buffer = self._buffer
        buffer.fill(self.source, self.size)
        if not buffer.items:
            raise StopIteration
        selected = guarded(
            self.failures,
            "select_samples_to_pack",
            lambda items: {"first_keys": [basic_sample_keys(s)["__key__"] for s in items[:3]]},
            self.task_encoder.select_samples_to_pack,
            list(buffer.items),
        )
        if selected is SKIPPED:  # the same buffer would fail again: drop it, as Energon does
            buffer.clear()
            return
        groups = [list(group) for group in selected if group]
        slots = self._check_groups(groups)
        if not groups:
            if not buffer.source_done:
                raise ConfigError(
                    f"select_samples_to_pack selected nothing from a full buffer of {len(buffer)} "
                    f"samples (packing_buffer_size={self.size}); it would never change. Select at "
                    "least one group, raise SkipSample to drop the buffer, or enlarge the buffer"
                )
            logger.warning("packing: %d samples left unselected at the end", len(buffer))
            buffer.clear()
            return
        self._pending = [(group, [buffer.keys[i] for i in at]) for group, at in zip(groups, slots)]
        buffer.remove({i for at in slots for i in at})

    def _check_groups(self, groups: list[list[Any]]) -> list[list[int]]:
        """Buffer slots of each group's samples; each must be in the buffer, at most once."""
        slot_of = {id(sample): i for i, sample in enumerate(self._buffer.items)}
        taken: set[int] = set()
        slots = []
        for group in groups:
            for sample in group:
                slot = slot_of.get(id(sample))
                if slot is None or slot in taken:
                    raise ConfigError(
                        f"select_samples_to_pack returned sample {basic_sample_keys(sample)['__key__']!r} "
                        f"{'twice' if slot is not None else 'that is not in the buffer'}; return "
                        "groups of the samples passed in, each at most once"
                    )
                taken.add(slot)
            slots.append([slot_of[id(sample)] for sample in group])
        return slots

    def _pack(self, group: list[Any], plain_keys: list[Any], strict: bool) -> Any:
        """postencode each member and pack them; SKIPPED when skipped (``strict`` re-raises).
        ``plain_keys``: the members' keys (None where the source knew none)."""
        te = self.task_encoder
        members, keys = [], []
        for sample, plain in zip(group, plain_keys):
            key = None if plain is None else from_plain(plain)  # None: packed as Energon does
            te._set_sample_context(self.seed, key)
            member = self._call(
                "postencode_sample", {"key": key}, te.postencode_sample, sample, strict
            )
            if member is not SKIPPED:
                members.append(member)
                keys.append(key)
        if not members:
            return SKIPPED
        # a pack of keyless members gets no key either: it cannot be fetched again
        known = [key for key in keys if key is not None]
        pack_key = PackKey(tuple(known)) if len(known) == len(keys) else None
        te._set_sample_context(self.seed, pack_key)
        packed = self._call(
            "pack_selected_samples", {"keys": keys}, te.pack_selected_samples, members, strict
        )
        if isinstance(packed, types.GeneratorType):
            raise ConfigError(
                "pack_selected_samples returned a generator: yielding several packs per group is "
                "not supported; return one packed sample"
            )
        self._key = pack_key
        if pack_key is None:
            return packed
        if isinstance(packed, dict):  # as Energon: a dict's own entry only, none is added
            if "__restore_key__" in packed:
                packed["__restore_key__"] = pack_key
        elif packed is not SKIPPED and hasattr(packed, "__restore_key__"):
            packed.__restore_key__ = pack_key
        return packed

    def _call(self, what: str, where: dict[str, Any], fn: Any, arg: Any, strict: bool) -> Any:
        if strict:  # a restore: a sample that packed before must pack again
            return fn(arg)
        return guarded(self.failures, what, lambda _: where, fn, arg)

    def fetch(self, restore_key: Any) -> Any:
        if not isinstance(restore_key, PackKey):
            raise StateError(f"Pack: not a restore key of a pack: {restore_key!r}")
        members = restore_key.members
        return self._pack(
            [self.source.fetch(key) for key in members],
            [to_plain(key) for key in members],
            strict=True,
        )

    def _reset(self) -> None:
        self._buffer = KeyedBuffer("Pack", self.hook)
        self._pending = []
        self._key = None

    def _save(self) -> dict[str, Any]:
        # the buffer refuses while it ever held an item of unknown key (every group came from it)
        return {"buffer": self._buffer.save(), "pending": [list(keys) for _, keys in self._pending]}

    def _validate(self, state: dict[str, Any]) -> None:
        pending = state["pending"]
        if not isinstance(pending, list):
            raise StateError(f"Pack: pending groups must be a list, got {type(pending).__name__}")
        check_held("Pack", [state["buffer"], *pending], self.size, "packing_buffer_size")

    def _restore(self, state: dict[str, Any]) -> None:
        self._reset()
        self._buffer.restore(state["buffer"], self.source.fetch)
        self._pending = [fetch_kept(group, self.source.fetch, "Pack") for group in state["pending"]]
