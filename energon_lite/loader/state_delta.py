"""A worker's state sent to the trainer as what changed since the state it sent before.

With a canonical layout a worker runs many logical pipelines (``stages/phases.py``) and a
batch moves only the pipelines of one phase; ``Phases`` hands out the same state object for
a pipeline that did not move. Sending every pipeline's state with every batch would cost
more than the batch (tens of KB of small lists per batch at 32 pipelines per worker), and
so would sending a moved pipeline's whole state: its shuffle buffer's keys are most of it,
and a batch of 4 samples changes 4 of its 100 keys, while encoding (or pickling, and
unpickling in the trainer) all 100 cost about 3% of a sample's CPU per pipeline batch.

So under a stage that declares ``LAZY_SOURCES`` the worker sends, per parent state:

* :data:`UNCHANGED` when it is the very object it sent last time;
* a patch (:func:`is_patch`) when it is a new state of the same structure: the values that differ from
  the one sent before, found by object identity first (a buffer's saved keys are the same
  key objects from one save to the next), then by type and value;
* the state itself otherwise (the first batch of a worker, a pipeline that starts).

The trainer rebuilds each from its own copy of the state sent before (:func:`with_unchanged`),
copying only the containers a patch touches: a state it handed out (``save_state_rank()``)
is never changed afterwards. A worker's batches reach the trainer in order and a new pass
starts its workers from the trainer's states, so the trainer's copy is always the one the
worker meant. Levels that are not ``LAZY_SOURCES`` (every plain chain) travel whole, as
before.
"""

from __future__ import annotations

from itertools import compress
from operator import is_not
from typing import Any

from energon_lite.stages.base import stage_class

UNCHANGED = "=unchanged"  # never a stage state (those are dicts or None)


PATCH = "=patch"  # the first key of a patch; never a key of a stage state


def is_patch(value: Any) -> bool:
    """Whether ``value`` is a patch: a plain dict ``{PATCH: 0, key or index: change}``, a
    change being a nested patch or the new value (plain dicts unpickle in C; a class of its
    own cost the trainer a Python call per patch)."""
    return type(value) is dict and PATCH in value


def applied(old: Any, patch: dict[Any, Any]) -> Any:
    """``old`` with ``patch``'s changes, in new containers where they changed (``old`` is
    kept as it was)."""
    out = dict(old) if isinstance(old, dict) else list(old)
    for where, change in patch.items():
        if where != PATCH:
            out[where] = applied(old[where], change) if is_patch(change) else change
    return out


_SAME = object()
_WHOLE = 8  # a list of at most this many items that is another object travels whole


def difference(old: Any, new: Any) -> Any:
    """``_SAME``, a patch from ``old`` to ``new``, or ``new`` itself (to replace)."""
    if new is old:
        return _SAME
    kind = type(new)
    if kind is not type(old):
        return new
    if kind is dict:
        if old.keys() != new.keys():
            return new
        changes = {key: value for key, value in new.items() if old[key] is not value}
    elif kind is list and len(new) > _WHOLE:
        if len(old) != len(new):
            return new
        # the slots holding other objects, found without a Python loop over the list
        changes = {i: new[i] for i in compress(range(len(new)), map(is_not, old, new))}
    else:  # a short list, or a scalar (of one type: True is not 1 in a saved state)
        return _SAME if kind is not list and old == new else new
    for where, value in list(changes.items()):
        before, inner = old[where], type(value)
        if inner is dict or (inner is list and len(value) > _WHOLE):
            change = difference(before, value)
        elif inner is list or type(before) is not inner:
            continue  # travels whole
        else:
            change = _SAME if before == value else value
        if change is _SAME:
            del changes[where]
        else:
            changes[where] = change
    if not changes:
        return _SAME
    if kind is list and 2 * len(changes) >= len(new):
        return new
    return {PATCH: 0, **changes}


def unchanged_marked(previous: Any, state: Any) -> Any:
    """``state`` to send, given ``previous`` (the state sent before): under a stage with
    ``LAZY_SOURCES`` each parent state as :data:`UNCHANGED`, a patch or itself."""
    if not isinstance(state, dict):
        return state
    out = dict(state)
    if "source" in state:
        before = previous.get("source") if isinstance(previous, dict) else None
        out["source"] = unchanged_marked(before, state["source"])
    now = state.get("sources")
    cls = stage_class(state.get("type"))
    if isinstance(now, list) and cls is not None and cls.LAZY_SOURCES:
        before = previous.get("sources") if isinstance(previous, dict) else None
        if not isinstance(before, list) or len(before) != len(now):
            before = [None] * len(now)
        out["sources"] = [_marked(old, new) for old, new in zip(before, now)]
    return out


def _marked(old: Any, new: Any) -> Any:
    if new is None or old is None:
        return new
    change = difference(old, new)
    return UNCHANGED if change is _SAME else change


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
        out["sources"] = [
            _kept(before, i)
            if isinstance(new, str) and new == UNCHANGED
            else applied(_kept(before, i), new)
            if is_patch(new)
            else new
            for i, new in enumerate(now)
        ]
    return out


def _kept(states: Any, index: int) -> Any:
    kept = states[index] if isinstance(states, list) and index < len(states) else None
    if kept is None:
        raise RuntimeError(  # a bug, not bad input: the worker and trainer disagree
            f"a worker sent parent state {index} as a change, but the trainer has none before"
        )
    return kept
