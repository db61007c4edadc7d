"""A worker's state sent to the trainer as what changed since the state it sent before.

A worker saves its chain's state after every batch and sends it with the batch, so the
trainer can save any step. Most of a state is a few integers per stage, but a buffer's saved
keys grow with the buffer: a shuffle buffer of 1,000 samples is 1,000 keys, and unpickling
them with every batch cost the trainer more than the batch itself (80 us against 25 us per
sample, plain 1 x 2 loader). A batch of 16 samples changes at most 32 of them. With a
canonical layout a worker runs many logical pipelines (``stages/phases.py``) and a batch
moves only the pipelines of one phase; ``Phases`` hands out the same state object for a
pipeline that did not move.

So the worker sends, level by level:

* the values of a stage's ``DELTA_KEYS`` (a buffer's keys; a reader's leftover after an
  elastic restore) that are lists of more than :data:`_LONG` items or dicts: as
  :data:`UNCHANGED` when they hold the same objects as the one sent before, or as a patch
  (:func:`is_patch`) of the slots that hold other objects (found by object identity,
  without a Python loop over a list: a buffer's saved keys are the same key objects from
  one save to the next);
* under a stage that declares ``LAZY_SOURCES``, each parent state as :data:`UNCHANGED` when
  it is the very object sent last time, a patch when it is a new state of the same structure
  (the values that differ, by identity first, then by type and value), or whole;
* everything else whole, as saved: the first batch of a worker, a pipeline that starts, a
  list whose length changed, and a blend's readers (comparing many small states costs more
  than sending them).

A level with something marked in it or under it is sent as a new dict that names the
marked keys under :data:`PATCHED` (``source`` or ``sources`` among them when a level
under them is marked); any other level is the saved object itself, so the trainer descends
only where something changed.

The trainer rebuilds each from its own copy of the state sent before (:func:`with_unchanged`),
copying only the containers a patch touches: a state it handed out (``save_state_rank()``)
is never changed afterwards. A worker's batches reach the trainer in order and a new pass
starts its workers from the trainer's states, so the trainer's copy is always the one the
worker meant. Only what travels is marked: the states the trainer keeps and saves are whole.
"""

from __future__ import annotations

from itertools import compress
from operator import is_, is_not
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
# a stage's own list (``DELTA_KEYS``) travels as changes only when it is longer than this:
# a batch changes up to twice its size of a buffer's keys, and below this comparing and
# rebuilding cost more than pickling the list (bench_state_transport.py)
_LONG = 128


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


PATCHED = "=patched"  # a level's key naming its values sent as changes; never a stage key


def unchanged_marked(previous: Any, state: Any) -> Any:
    """``state`` to send, given ``previous`` (the state sent before): the long lists and dicts
    of each level's ``DELTA_KEYS`` as :data:`UNCHANGED` or a patch, and under a stage with
    ``LAZY_SOURCES`` each parent state as :data:`UNCHANGED`, a patch or itself. A level with
    nothing marked in it or under it is ``state``'s own object; a marked level names its
    marked keys under :data:`PATCHED` (``source`` and ``sources`` among them when a level
    under them is marked), so the trainer descends only where something changed."""
    if not isinstance(state, dict):
        return state
    before = previous if isinstance(previous, dict) else {}
    cls = stage_class(state.get("type"))
    marked: dict[str, Any] = {}
    for key in cls.DELTA_KEYS if cls is not None else ():
        value, old = state.get(key), before.get(key)
        kind = type(value)
        if type(old) is kind and (kind is dict or (isinstance(value, list) and len(value) > _LONG)):
            change = difference(old, value)
            if change is not value:
                marked[key] = UNCHANGED if change is _SAME else change
    if "source" in state:
        sent = unchanged_marked(before.get("source"), state["source"])
        if sent is not state["source"]:
            marked["source"] = sent
    now = state.get("sources")
    if type(now) is list and cls is not None and cls.LAZY_SOURCES:
        # other levels' parents (a blend's readers) travel as saved: comparing many small
        # states would cost more than sending them
        sent = _sources_marked(before.get("sources"), now)
        if sent is not now:
            marked["sources"] = sent
    if not marked:
        return state
    return {**state, **marked, PATCHED: list(marked)}


def _sources_marked(olds: Any, now: list[Any]) -> list[Any]:
    """A ``LAZY_SOURCES`` level's parent states to send: ``now`` itself when none is marked."""
    if not isinstance(olds, list) or len(olds) != len(now):
        olds = [None] * len(now)
    sent = [_marked(old, new) for old, new in zip(olds, now)]
    return now if all(map(is_, sent, now)) else sent


def _marked(old: Any, new: Any) -> Any:
    if new is None or old is None:
        return new
    change = difference(old, new)
    return UNCHANGED if change is _SAME else change


def with_unchanged(previous: Any, state: Any) -> Any:
    """The whole state from what a worker sent (:func:`unchanged_marked`) and the trainer's
    copy of the state before it; ``state`` itself where nothing in it is marked."""
    if not isinstance(state, dict) or PATCHED not in state:
        return state
    before = previous if isinstance(previous, dict) else {}
    out = dict(state)
    for key in out.pop(PATCHED):
        old, change = before.get(key), state[key]
        if key == "source":
            out[key] = with_unchanged(old, change)
        elif key == "sources":
            out[key] = [_rebuilt(old, i, new) for i, new in enumerate(change)]
        elif not isinstance(old, (list, dict)):
            raise RuntimeError(  # a bug, not bad input: the worker and trainer disagree
                f"a worker sent the {state.get('type')} state's {key!r} as a change, but the "
                "trainer has nothing to change before"
            )
        else:
            out[key] = old if isinstance(change, str) else applied(old, change)
    return out


def _rebuilt(olds: Any, index: int, new: Any) -> Any:
    """Parent state ``index`` from what was sent for it and the trainer's states before."""
    if isinstance(new, str) and new == UNCHANGED:
        return _kept(olds, index)
    if is_patch(new):
        return applied(_kept(olds, index), new)
    return with_unchanged(_kept_or_none(olds, index), new)


def _kept_or_none(states: Any, index: int) -> Any:
    return states[index] if isinstance(states, list) and index < len(states) else None


def _kept(states: Any, index: int) -> Any:
    kept = _kept_or_none(states, index)
    if kept is None:
        raise RuntimeError(  # a bug, not bad input: the worker and trainer disagree
            f"a worker sent parent state {index} as a change, but the trainer has none before"
        )
    return kept
