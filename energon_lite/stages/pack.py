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

The packed sample's ``__restore_key__`` becomes ``("Pack", key_1, ..., key_n)`` (its
members' keys), so ``fetch`` rebuilds it: fetch each member, postencode, pack again.

State: the restore keys of the buffered samples and of the queued groups (``size`` keys at
most), nothing else. Restore fetches them again through the source.
"""

from __future__ import annotations

from typing import Any

from energon_lite.errors import ConfigError, FailureTracker, SkipSample, StateError, logger
from energon_lite.samples import basic_sample_keys
from energon_lite.stage import Stage, fill
from energon_lite.task_encoder import TaskEncoder

PACK_KEY = "Pack"


def _restore_key(sample: Any) -> Any:
    key = basic_sample_keys(sample)["__restore_key__"]
    if key is None:
        raise ConfigError(
            f"packing: {type(sample).__name__} sample has no __restore_key__; return samples "
            "that keep it from preencode_sample (e.g. MySample.derive_from(sample, ...))"
        )
    return key


class Pack(Stage):
    source: Stage  # always set: this stage has one parent
    _buffer: list[Any]
    _pending: list[list[Any]]
    _source_done: bool

    def __init__(
        self,
        source: Stage,
        size: int,
        task_encoder: TaskEncoder,
        seed: int,
        failures: FailureTracker | None = None,
    ) -> None:
        if size < 1:
            raise ConfigError(f"{size=} for the packing buffer; set packing_buffer_size >= 1")
        self.source = source
        self.size = size
        self.task_encoder = task_encoder
        self.seed = seed
        self.failures = failures or FailureTracker(0)
        self.restore_state(None)

    def next(self) -> Any:
        while True:
            if not self._pending:
                self._select()
                continue
            packed = self._pack(self._pending.pop(0), strict=False)
            if packed is not None:
                self.failures.ok()
                return packed

    def _select(self) -> None:
        """Refill the buffer and queue the selected groups; StopIteration when all is done."""
        buffer = self._buffer
        if not self._source_done:
            self._source_done = fill(self.source, buffer, self.size)
        if not buffer:
            raise StopIteration
        try:
            groups = [list(g) for g in self.task_encoder.select_samples_to_pack(list(buffer)) if g]
        except SkipSample:
            buffer.clear()
            return
        except Exception as exc:
            keys = [basic_sample_keys(s)["__key__"] for s in buffer[:3]]
            buffer.clear()  # the same buffer would fail again: drop it, as Energon does
            self.failures.failed("select_samples_to_pack", {"first_keys": keys}, exc)
            return
        slot_of = {id(sample): i for i, sample in enumerate(buffer)}
        taken: set[int] = set()
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
        if not groups:
            if not self._source_done:
                raise ConfigError(
                    f"select_samples_to_pack selected nothing from a full buffer of {len(buffer)} "
                    f"samples (packing_buffer_size={self.size}); it would never change. Select at "
                    "least one group, raise SkipSample to drop the buffer, or enlarge the buffer"
                )
            logger.warning("packing: %d samples left unselected at the end", len(buffer))
            buffer.clear()
            return
        self._buffer = [sample for i, sample in enumerate(buffer) if i not in taken]
        self._pending = groups

    def _pack(self, group: list[Any], strict: bool) -> Any:
        """postencode each member and pack them; None when skipped (``strict`` re-raises)."""
        te = self.task_encoder
        members, keys = [], []
        for sample in group:
            key = _restore_key(sample)
            te._set_sample_context(self.seed, key)
            try:
                members.append(te.postencode_sample(sample))
            except Exception as exc:
                if strict:
                    raise
                if not isinstance(exc, SkipSample):
                    self.failures.failed("postencode_sample", {"key": key}, exc)
                continue
            keys.append(key)
        if not members:
            return None
        pack_key = (PACK_KEY, *keys)
        te._set_sample_context(self.seed, pack_key)
        try:
            packed = te.pack_selected_samples(members)
        except Exception as exc:
            if strict:
                raise
            if not isinstance(exc, SkipSample):
                self.failures.failed("pack_selected_samples", {"keys": keys}, exc)
            return None
        if isinstance(packed, dict):
            packed["__restore_key__"] = pack_key
        elif hasattr(packed, "__restore_key__"):
            packed.__restore_key__ = pack_key
        return packed

    def fetch(self, restore_key: Any) -> Any:
        if (
            not isinstance(restore_key, (tuple, list))
            or not restore_key
            or restore_key[0] != PACK_KEY
        ):
            raise StateError(f"Pack: not a restore key of a pack: {restore_key!r}")
        return self._pack([self.source.fetch(key) for key in restore_key[1:]], strict=True)

    def save_state(self) -> dict[str, Any]:
        return self._state(
            buffer=[_restore_key(s) for s in self._buffer],
            pending=[[_restore_key(s) for s in group] for group in self._pending],
        )

    def restore_state(self, state: dict[str, Any] | None) -> None:
        self._source_done = False
        if state is None:
            self.source.restore_state(None)
            self._buffer = []
            self._pending = []
            return
        state = self._check_state(state, "buffer", "pending")
        held = len(state["buffer"]) + sum(len(group) for group in state["pending"])
        if held > self.size:
            raise StateError(
                f"Pack: state holds {held} samples but the packing buffer size is {self.size}; "
                "was it saved with another packing_buffer_size?"
            )
        self.source.restore_state(state["source"])
        self._buffer = [self.source.fetch(key) for key in state["buffer"]]
        self._pending = [[self.source.fetch(key) for key in group] for group in state["pending"]]
