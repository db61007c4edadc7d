"""The Stage base class: the contract every pipeline stage follows.

A stage produces items one at a time from its parent(s) and can say where it is:

* ``next()`` returns the next item or raises ``StopIteration`` at the end of its stream;
* ``save_state()`` returns plain data: the stage's type name under ``"type"``, its own
  fields (exactly the names in ``STATE_KEYS``) and its parent's state under ``"source"``
  (``"sources"`` for several parents);
* ``restore_state(None)`` starts fresh, ``restore_state(state)`` continues exactly after the
  last item handed out when ``state`` was saved. There is no separate initialisation path;
* ``fetch(restore_key)`` returns the item with that ``__restore_key__`` again by random
  access, re-running this stage's deterministic work. Buffers use it on restore.

Constructors only store settings: no I/O, no epoch planning. A stage starts on
``restore_state`` (the loader always calls it) or, when nobody did, on its first
``next()``. States are only taken between two ``next()`` calls.

Subclasses implement ``next``, and, when they hold anything between items, ``_reset()``
(fresh start), ``_save() -> dict`` and ``_restore(state)``; the base class restores the
parents first and checks the state's shape (:func:`energon_lite.state.codec.check_level`);
``_validate(state)`` checks the stage's own fields before anything is restored.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from energon_lite.errors import StateError
from energon_lite.state.codec import check_level


class Stage:
    """Base class of all stages. Subclasses set ``source`` (or ``sources``) and override."""

    STATE_KEYS: ClassVar[tuple[str, ...]] = ()  # the stage's own state fields
    # fields a state may carry but need not (an elastic restore's leftover work)
    OPTIONAL_KEYS: ClassVar[tuple[str, ...]] = ()
    source: Stage | None = None
    sources: list[Any] | None = None  # stages with several parents
    _started: bool = False

    def next(self) -> Any:
        raise NotImplementedError

    # state --------------------------------------------------------------------------------

    def save_state(self) -> dict[str, Any]:
        self._start_if_fresh()  # a stage nobody started is at its fresh start
        state: dict[str, Any] = {"type": type(self).__name__, **self._save()}
        if self.source is not None:
            state["source"] = self.source.save_state()
        elif self.sources is not None:
            state["sources"] = [source.save_state() for source in self.sources]
        return state

    def restore_state(self, state: dict[str, Any] | None) -> None:
        if state is None:
            for parent in self._parents():
                parent.restore_state(None)
            self._reset()
        else:
            check_level(
                type(self).__name__, self.STATE_KEYS, self._parent_key(), state, self.OPTIONAL_KEYS
            )
            self._validate(state)
            if self.source is not None:
                self.source.restore_state(state["source"])
            elif self.sources is not None:
                self._restore_sources(state["sources"])
            self._restore(state)
        self._started = True

    def _start_if_fresh(self) -> None:
        """Start fresh if nobody restored this stage yet (call at the top of ``next``)."""
        if not self._started:
            self.restore_state(None)

    # hooks for subclasses ------------------------------------------------------------------

    def _reset(self) -> None:
        """Start fresh (parents are already reset). Default: nothing held."""

    def _save(self) -> dict[str, Any]:
        """This stage's own fields, exactly ``STATE_KEYS``. Default: none."""
        return {}

    def _validate(self, state: dict[str, Any]) -> None:
        """Check this stage's own fields before anything is restored (no I/O). Default: none."""

    def _restore(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (shape checked, parents restored). Default: nothing held."""

    def fetch(self, restore_key: Any) -> Any:
        """Default: the stage does not change items, so its parent can fetch them."""
        if self.source is None:
            raise NotImplementedError(f"{type(self).__name__} cannot fetch by restore key")
        return self.source.fetch(restore_key)

    def __iter__(self) -> Iterator[Any]:
        while True:
            try:
                yield self.next()
            except StopIteration:
                return

    # helpers ---------------------------------------------------------------------------------

    def _parents(self) -> list[Stage]:
        if self.source is not None:
            return [self.source]
        return list(self.sources or [])

    def _parent_key(self) -> str | None:
        if self.source is not None:
            return "source"
        return "sources" if self.sources is not None else None

    def _restore_sources(self, states: list[Any]) -> None:
        assert self.sources is not None
        if len(states) != len(self.sources):
            raise StateError(
                f"{type(self).__name__}: state has {len(states)} sources, this stage has "
                f"{len(self.sources)}; was it saved with another metadataset?"
            )
        for source, source_state in zip(self.sources, states):
            source.restore_state(source_state)
