"""Saved rank states in today's form: one reader per old form, applied where a state enters.

Like a database migration: every saved rank state (``save_state_rank()``, a file read by
``energon-lite checkpoint info`` / ``redist``, the states given to ``restore_state_global``)
passes :func:`upgrade_state` before anything else reads it, so the checks, the elastic and
canonical moves and the stages see one form only: today's. A stage branches on a field's
declared value, never on whether the field is there.

The forms read, and since when they exist:

* version 3 (since 2026-11-27): a canonical layout's pipelines packed; its reader
  (:mod:`energon_lite.state.compact`, ``unpacked``) gives version 2 before this runs.
* version 2 (since 2026-11-23: typed restore keys and a content digest): today's version.
  Fields added since without a new version are filled in, each with the value that keeps
  the run going as it was saved:

  - ``Reader`` levels without ``dealing`` (saved before 2026-11-27) were dealt with global
    slices: ``"dealing": "slices"`` (:mod:`energon_lite.stages.slices`);
  - ``Encode`` levels without ``seeds`` (saved before 2026-11-27) seeded user hooks from the
    restore key and made no ``IndexKey``: ``"seeds": 1``
    (:mod:`energon_lite.task_encoder.hook_index`);
  - ``Encode`` levels without ``calls`` and ``Batch`` levels without ``batches`` (saved
    before 2026-11-23, or dealt to another layout by an elastic restore before 2026-11-28)
    count the hook indices from 0 on: ``"calls": 0``, ``"batches": 0``;
  - a ``config`` that names the library's collate functions by the modules they lived in
    before the package layout (``energon_lite.generic_collate.*``, ``energon_lite.collate.*``;
    saved before 2026-11-26): their public names (``energon_lite.<name>``).

* version 1 (energon_lite 0.1, before 2026-11-23): refused, naming the version. Its states
  carry no digest, so nothing tells an intact one from an edited one.
* any other version (a newer energon_lite's): refused, naming the version.

A state saved by Megatron-Energon 7.x is no form of ours and does not pass here: it is read
as plain data by :mod:`energon_lite.resume.energon_import` and continued by
:mod:`energon_lite.resume.energon_state`, which needs the loader's dataset.

Fields a state of today may leave out (a sparse form: a weighted blend's ``stream`` when
``counter``, ``base``, ``round`` and, after an elastic restore, ``tally``; an epochized
blend's ``rounding`` when ``exact``; an elastic restore's ``left``) are today's form, not an
old one: the stages declare them optional and say what their absence means.

An upgraded state is sealed again with its new digest only when it arrived intact: a state
edited after ``save_state_rank()`` keeps its old digest and is refused where digests are
checked. Plain data only: this module reads levels by their saved ``"type"`` name and
imports no stage.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from energon_lite.errors import StateError, short_repr
from energon_lite.state.codec import STATE_VERSION, state_digest

LOADER_TYPE = "SavableLoader"  # the "type" of a rank state (not a stage)
_COMPACT = 3  # the compact form's version (state/compact.py), unpacked before an upgrade

# the library's collate functions named by their modules before the package layout
_OLD_FUNCTION_MODULES = ("energon_lite.generic_collate.", "energon_lite.collate.")


def _reader_dealing(level: dict[str, Any]) -> dict[str, Any]:
    """A Reader saved before ``dealing`` (2026-11-27) continues the global-slice dealing."""
    return _filled(level, {"dealing": "slices"})


def _encode_counters(level: dict[str, Any]) -> dict[str, Any]:
    """An Encode saved before ``calls`` (2026-11-23) counts from 0; one saved before ``seeds``
    (2026-11-27) seeds hooks from the restore key."""
    return _filled(level, {"calls": 0, "seeds": 1})


def _batch_counter(level: dict[str, Any]) -> dict[str, Any]:
    """A Batch saved before ``batches`` (2026-11-23) counts from 0."""
    return _filled(level, {"batches": 0})


def _filled(level: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    missing = {key: value for key, value in fields.items() if key not in level}
    return {**level, **missing} if missing else level


# a level's saved "type" -> its reader of older forms (the level, or an upgraded copy)
LEVEL_UPGRADES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "Reader": _reader_dealing,
    "Encode": _encode_counters,
    "Batch": _batch_counter,
}


def upgrade_state(state: Any, *, strict: bool = True) -> Any:
    """``state`` (one rank's saved state, a compact one unpacked) in today's form; the input
    is never changed.

    Anything that is not a rank state passes unchanged (its reader refuses it, naming
    what it got). A version this library does not read raises StateError naming it, or
    with ``strict=False`` (describing a file) passes unchanged.
    """
    if not isinstance(state, dict) or state.get("type") != LOADER_TYPE:
        return state
    version = state.get("version")
    if version != STATE_VERSION:
        if strict:
            raise StateError(_refusal(version))
        return state
    out = dict(state)
    try:
        if "config" in out:
            out["config"] = _config(out["config"])
        if isinstance(out.get("workers"), list):
            out["workers"] = _each(_levels, out["workers"])
    except RecursionError:
        if strict:
            raise StateError("loader state is nested too deeply; it is corrupt") from None
        return state
    if all(out[key] is state[key] for key in state):
        return state
    if state.get("digest") == state_digest(state):  # intact: sealed again as upgraded
        out["digest"] = state_digest(out)
    return out


def _refusal(version: Any) -> str:
    said = f"loader state version {short_repr(version)}"
    reads = f"this energon_lite reads {STATE_VERSION} and {_COMPACT} (compact pipelines)"
    number = version if isinstance(version, int) and not isinstance(version, bool) else None
    if number == 1:
        return (
            f"{said} (energon_lite 0.1, before 2026-11-23) carries no digest and cannot be "
            f"resumed; {reads}"
        )
    if number == _COMPACT:  # a caller's slip, not the user's: compact states unpack first
        return f"{said} (compact pipelines) is read unpacked (state.compact.unpacked)"
    if number is not None and number > _COMPACT:
        return f"{said} was written by a newer energon_lite; {reads}: upgrade energon_lite"
    return f"{said} is unknown; {reads}; the state is corrupt"


def _levels(level: Any) -> Any:
    """``level`` and its parents in today's form (shared where nothing changed)."""
    if not isinstance(level, dict):
        return level
    upgrade = LEVEL_UPGRADES.get(level["type"]) if isinstance(level.get("type"), str) else None
    out = upgrade(level) if upgrade is not None else level
    source = out.get("source")
    if isinstance(source, dict):
        new = _levels(source)
        if new is not source:
            out = {**out, "source": new}
    sources = out.get("sources")
    if isinstance(sources, list):
        new_sources = _each(_levels, sources)
        if new_sources is not sources:
            out = {**out, "sources": new_sources}
    return out


def _each(upgrade: Callable[[Any], Any], items: list[Any] | tuple[Any, ...]) -> Any:
    """``items`` upgraded one by one: a new list where one changed, else ``items`` itself."""
    new = [upgrade(item) for item in items]
    return items if all(a is b for a, b in zip(new, items)) else new


def _config(value: Any) -> Any:
    """``value`` with the old module paths of the library's functions as their public names."""
    if isinstance(value, str):
        for old in _OLD_FUNCTION_MODULES:
            if value.startswith(old):
                return "energon_lite." + value[len(old) :]
        return value
    if isinstance(value, (list, tuple)):
        return _each(_config, value)
    if isinstance(value, dict):
        changed = {k: _config(v) for k, v in value.items()}
        return value if all(changed[k] is value[k] for k in value) else changed
    return value
