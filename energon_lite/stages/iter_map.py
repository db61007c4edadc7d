"""``IterMap``: a function from the stream of items to a new stream (Energon's ``IterMapDataset``).

``fn(iterator) -> iterable`` may take several items per output (pairing, windows) or give
several outputs per item. The stage tracks the current *group*: the inputs ``fn`` pulled
since it last produced an output before pulling again, and how many outputs it has handed
out since. Output ``n`` of a group gets the restore key ``SubKey(PackKey(inputs), n)``.

Restore fetches the group's inputs again, feeds them to a fresh ``fn`` ahead of the
restored source and skips the outputs already handed out. That is exact whenever ``fn``
carries nothing from one group to the next (Energon's requirement for a savable iter-map);
``fetch`` (for a buffer above, or ``restore_sample``) also needs ``stateless=True``.

An error inside ``fn`` ends its run: it is logged and counted by the failure tracker, and a
fresh ``fn`` continues with the next input (``SkipSample`` does the same without a log).

State: ``pending``, the plain keys of the group's inputs, and ``handed``, its outputs so far.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from energon_lite.errors import ConfigError, FailureTracker, SkipSample, StateError, short_repr
from energon_lite.stages.base import Stage
from energon_lite.stages.buffer import fetch_keys, restore_key_of
from energon_lite.state.codec import state_count
from energon_lite.state.restore_key import PackKey, SubKey, from_plain, to_plain


class IterMap(Stage):
    STATE_KEYS = ("pending", "handed")
    DELTA_KEYS = ("pending",)  # the keys of the inputs still pending, kept as saved
    source: Stage  # always set: this stage has one parent
    _outputs: Iterator[Any] | None  # fn's running output stream
    _pending: list[Any]  # plain keys of the current group's inputs
    _refeed: list[Any]  # a restored group's inputs, fed to fn before the source

    def __init__(
        self,
        source: Stage,
        fn: Callable[[Iterator[Any]], Iterable[Any]],
        stateless: bool = False,
        failures: FailureTracker | None = None,
    ) -> None:
        self.source = source
        self.fn = fn
        self.stateless = stateless
        self.failures = failures or FailureTracker(0)

    def next(self) -> Any:
        self._start_if_fresh()
        while True:
            if self._outputs is None:
                refeed, self._refeed = self._refeed, []
                self._outputs = iter(self.fn(itertools.chain(refeed, self._inputs())))
            try:
                out = next(self._outputs)
            except StopIteration:
                raise
            except ConfigError:
                raise
            except Exception as exc:  # fn's run is over: a fresh one takes the next input
                if not isinstance(exc, SkipSample):
                    self.failures.failed("iter_map_fn", {"pending": self._pending}, exc)
                self._outputs, self._pending, self._handed, self._skip = None, [], 0, 0
                continue
            self._handed += 1
            if self._skip:  # handed out before the state was saved
                self._skip -= 1
                continue
            self.failures.ok()
            return self._keyed(out, self._pending, self._handed - 1)

    def _inputs(self) -> Iterator[Any]:
        """The source's items, recording each one's key in the current group."""
        while True:
            try:
                item = self.source.next()
            except StopIteration:
                return
            if self._handed:  # fn has produced since its last pull: a new group starts
                self._pending, self._handed = [], 0
            self._pending.append(to_plain(restore_key_of(item, "IterMapDataset")))
            yield item

    @staticmethod
    def _keyed(out: Any, pending: list[Any], sub: int) -> Any:
        if not pending:
            return out
        key = SubKey(PackKey(tuple(from_plain(k) for k in pending)), sub)
        if isinstance(out, dict):
            out["__restore_key__"] = key
        elif hasattr(out, "__restore_key__"):
            out.__restore_key__ = key
        return out

    def fetch(self, restore_key: Any) -> Any:
        if not self.stateless:
            raise StateError(
                "IterMapDataset: items cannot be made again by restore key unless the "
                "iter_map_fn is stateless; pass stateless_iter_fn=True if it is"
            )
        if not (isinstance(restore_key, SubKey) and isinstance(restore_key.parent, PackKey)):
            raise StateError(f"IterMap: not a restore key of mine: {short_repr(restore_key)}")
        members = restore_key.parent.members
        outputs = iter(self.fn(iter([self.source.fetch(key) for key in members])))
        out = next(itertools.islice(outputs, restore_key.sub, None), None)
        if out is None:
            raise StateError(f"IterMap: iter_map_fn gave no output {restore_key.sub} again")
        return self._keyed(out, [to_plain(key) for key in members], restore_key.sub)

    def _reset(self) -> None:
        self._outputs = None
        self._pending = []
        self._handed = 0
        self._skip = 0
        self._refeed = []

    def _save(self) -> dict[str, Any]:
        return {"pending": list(self._pending), "handed": self._handed}

    def _restore(self, state: dict[str, Any]) -> None:
        self._reset()
        self._refeed = fetch_keys(state["pending"], self.source.fetch, "IterMap")
        self._pending = list(state["pending"])
        self._skip = state_count(state["handed"], "IterMap handed")
