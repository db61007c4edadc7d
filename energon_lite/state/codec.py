"""Loader state: msgpack encoding, and the one validator of a state's shape.

A stage declares its own state fields once (``Stage.STATE_KEYS``). :func:`check_level`
checks one level of a state against that declaration (the stage does it on restore);
:func:`check_state_shape` checks a whole saved chain against a pipeline's declared shape
(the trainer does it before any worker starts, without building a chain).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import msgpack

from energon_lite.errors import StateError, short_repr

STATE_VERSION = 2  # 2: typed restore keys and a content digest


def encode_state(state: Any) -> bytes:
    """Compact bytes of a (plain-data) state."""
    return msgpack.packb(state, use_bin_type=True)


def decode_state(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError) as exc:
        raise StateError(f"loader state bytes are corrupt or truncated: {exc}") from None


# what a state may hold: every restore reads a state through its digest first, so these
# bounds hold on every path (a deeper or larger value would end in Python's RecursionError or
# msgpack's OverflowError instead of a StateError naming the field)
MAX_STATE_DEPTH = 100  # nesting of dicts and lists; a real chain's state nests about 20 deep
_INT_RANGE = (-(2**63), 2**64 - 1)  # msgpack's integers


class _Unfit(Exception):
    """A value a state may not hold (:func:`_unfit_path` finds where)."""


def state_digest(state: dict[str, Any]) -> str:
    """A digest of a loader state's content (everything but its ``digest`` field), stable
    across msgpack, pickle, ``torch.save`` and JSON round trips (keys are sorted).
    StateError naming the field for a state nested deeper than :data:`MAX_STATE_DEPTH` or
    holding an integer outside 64 bits."""
    body = {key: value for key, value in state.items() if key != "digest"}
    try:
        payload = msgpack.packb(_canonical(body, 0), use_bin_type=True)
    except (_Unfit, OverflowError):  # msgpack refuses integers outside 64 bits
        where, problem = _unfit_path(body)
        raise StateError(f"loader state field {where}: {problem}; it is corrupt") from None
    return hashlib.blake2b(payload, digest_size=16).hexdigest()


def _canonical(value: Any, depth: int) -> Any:
    if isinstance(value, dict):
        if depth >= MAX_STATE_DEPTH:
            raise _Unfit
        return [[str(key), _canonical(value[key], depth + 1)] for key in sorted(value, key=str)]
    if isinstance(value, (list, tuple)):
        if depth >= MAX_STATE_DEPTH:
            raise _Unfit
        return [_canonical(v, depth + 1) for v in value]
    return value


def _unfit_path(body: dict[str, Any]) -> tuple[str, str]:
    """Where the first value :func:`_canonical` refused sits (``workers[1].source.rng``), and
    why; searched without recursion, in the digest's order, only once a state is refused."""
    stack: list[tuple[Any, str, int]] = [(body, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, (dict, list, tuple)):
            if depth >= MAX_STATE_DEPTH:
                return _short_path(path), f"nested deeper than {MAX_STATE_DEPTH} levels"
            if isinstance(value, dict):
                children = [(value[k], f"{path}.{_name(k)}") for k in sorted(value, key=str)]
            else:
                children = [(v, f"{path}[{i}]") for i, v in enumerate(value)]
            stack.extend((child, where, depth + 1) for child, where in reversed(children))
        elif isinstance(value, int) and not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            return _short_path(
                path
            ), f"{short_repr(value)} is outside the 64-bit integers a state holds"
    return "the state", "it cannot be encoded"


def _name(key: Any) -> str:
    return key if isinstance(key, str) and len(key) <= 40 else short_repr(key, 40)


def _short_path(path: str) -> str:
    """A path of a crafted nesting, shortened: where it starts is what names it."""
    path = path.lstrip(".")
    return path if len(path) <= 120 else path[:100] + "..."


def state_count(value: Any, what: str) -> int:
    """An integer >= 0 read from a state (a counter, a position); StateError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StateError(f"{what}: {short_repr(value)} is not a count >= 0; the state is corrupt")
    return value


def check_level(
    name: str,
    keys: Sequence[str],
    parents: str | None,
    state: Any,
    optional: Sequence[str] = (),
) -> dict[str, Any]:
    """Check one stage's level of a state: a dict of stage ``name`` with exactly its
    declared ``keys`` (plus any of ``optional``) and its parents' entry
    (``"source"``/``"sources"``/None)."""
    if not isinstance(state, dict):
        raise StateError(f"{name}: state must be a dict, got {type(state).__name__}; it is corrupt")
    if state.get("type") != name:
        raise StateError(
            f"{name}: state belongs to stage {short_repr(state.get('type'))}, not {name!r}; "
            "was it saved by a loader with other stages (packing, grouping, blend)?"
        )
    expected = {"type", *keys, *([parents] if parents else [])}
    missing = sorted(expected - set(state))
    extra = sorted(set(state) - expected - set(optional))
    if missing or extra:
        problem = f"is missing {missing}" if missing else f"has unknown fields {extra}"
        raise StateError(f"{name}: state {problem}; it is truncated or corrupt")
    if parents == "sources" and not isinstance(state["sources"], list):
        raise StateError(f"{name}: state's sources must be a list; it is corrupt")
    return state


def check_state_shape(shape: dict[str, Any], state: Any) -> None:
    """Check a saved chain against a declared shape ``{"type", "keys", "source"|"sources"}``
    (``Pipeline.state_shape``): the same stages, each with its declared fields. No I/O."""
    parents = "source" if "source" in shape else "sources" if "sources" in shape else None
    check_level(shape["type"], shape["keys"], parents, state, shape.get("optional", ()))
    if parents == "source":
        check_state_shape(shape["source"], state["source"])
    elif parents == "sources":
        if len(state["sources"]) != len(shape["sources"]):
            raise StateError(
                f"{shape['type']}: state has {len(state['sources'])} sources, this loader "
                f"{len(shape['sources'])}; was it saved with another metadataset?"
            )
        for child, saved in zip(shape["sources"], state["sources"]):
            if saved is None and shape.get("fresh_sources"):
                continue  # a parent that starts fresh
            check_state_shape(child, saved)
