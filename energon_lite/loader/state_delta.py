"""A worker's state sent to the trainer as what changed since the state it sent before.

With a canonical layout a worker runs many logical pipelines (``stages/phases.py``) and a
batch moves only the pipelines of one phase; ``Phases`` hands out the same state object for
a pipeline that did not move. Pickling every pipeline's state with every batch would cost
the trainer more than the batch (tens of KB of small lists per batch at 32 pipelines per
worker), so the worker replaces each parent state that is the very object it sent last time
by :data:`UNCHANGED`, and the trainer puts its copy back (:func:`with_unchanged`). A worker's
batches reach the trainer in order and a new pass starts its workers from the trainer's
states, so the trainer's copy is always the one the worker meant. Chains whose parents
save new objects each time (every chain but ``Phases``) travel whole, as before.

The pipelines a batch did move travel as msgpack bytes, under a stage that declares
``LAZY_SOURCES``: the trainer keeps them so and decodes them only for
``save_state_rank()`` (:func:`decoded`); a worker restarted from the trainer's states
decodes each when its phase comes. Unpickling a dozen KB of small key lists per batch had
cost the trainer as much again as the unchanged ones.
"""

from __future__ import annotations

from typing import Any

from energon_lite.stages.base import stage_class
from energon_lite.state.codec import decode_state, encode_state

UNCHANGED = "=unchanged"  # never a stage state (those are dicts or None)


def unchanged_marked(previous: Any, state: Any) -> Any:
    """``state`` with each parent state under ``sources`` that is the same object as in
    ``previous`` (the state sent before) replaced by :data:`UNCHANGED`; under a stage with
    ``LAZY_SOURCES`` the others as msgpack bytes."""
    if not isinstance(state, dict):
        return state
    out = dict(state)
    if "source" in state:
        before = previous.get("source") if isinstance(previous, dict) else None
        out["source"] = unchanged_marked(before, state["source"])
    now = state.get("sources")
    if isinstance(now, list):
        before = previous.get("sources") if isinstance(previous, dict) else None
        if not isinstance(before, list) or len(before) != len(now):
            before = [None] * len(now)
        cls = stage_class(state.get("type"))
        lazy = cls is not None and cls.LAZY_SOURCES
        out["sources"] = [
            UNCHANGED
            if new is old and new is not None
            else encode_state(new)
            if lazy and isinstance(new, dict)  # bytes: a state the trainer gave, still kept
            else new
            for old, new in zip(before, now)
        ]
    return out


def decoded(state: Any) -> Any:
    """A state the trainer kept, with every parent state kept as bytes decoded."""
    if isinstance(state, bytes):
        return decode_state(state)
    if not isinstance(state, dict):
        return state
    out = dict(state)
    if "source" in state:
        out["source"] = decoded(state["source"])
    if isinstance(state.get("sources"), list):
        out["sources"] = [decoded(source) for source in state["sources"]]
    return out


def with_unchanged(previous: Any, state: Any) -> Any:
    """The whole state from what a worker sent (:func:`unchanged_marked`) and the trainer's
    copy of the state before it."""
    if not isinstance(state, dict):
        return state
    out = dict(state)
    if "source" in state:
        before = previous.get("source") if isinstance(previous, dict) else None
        out["source"] = with_unchanged(before, state["source"])
    now = state.get("sources")
    if isinstance(now, list):
        before = previous.get("sources") if isinstance(previous, dict) else None
        if UNCHANGED in now:  # (only Phases marks its parents; other levels pass as sent)
            out["sources"] = [
                _kept(before, i) if new == UNCHANGED else new for i, new in enumerate(now)
            ]
    return out


def _at(states: Any, index: int) -> Any:
    return states[index] if isinstance(states, list) and index < len(states) else None


def _kept(states: Any, index: int) -> Any:
    kept = _at(states, index)
    if kept is None:
        raise RuntimeError(  # a bug, not bad input: the worker and trainer disagree
            f"a worker marked parent state {index} unchanged, but the trainer has none"
        )
    return kept
