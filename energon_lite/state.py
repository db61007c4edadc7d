"""Loader state: msgpack encoding and the checks that refuse a state of another loader."""

from __future__ import annotations

from typing import Any

import msgpack

from energon_lite.errors import StateError

STATE_VERSION = 1


def encode_state(state: Any) -> bytes:
    """Compact bytes of a (plain-data) state."""
    return msgpack.packb(state, use_bin_type=True)


def decode_state(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError) as exc:
        raise StateError(f"loader state bytes are corrupt or truncated: {exc}") from None


def check_same_config(saved: Any, current: dict[str, Any]) -> None:
    """Raise StateError naming every setting in which ``saved`` differs from ``current``."""
    if not isinstance(saved, dict):
        raise StateError(f"loader state has no config dict (got {type(saved).__name__}); corrupt")
    differences = [
        f"{key}: state has {saved.get(key)!r}, this loader has {current[key]!r}"
        for key in current
        if _normalise(saved.get(key)) != _normalise(current[key])
    ]
    if differences:
        raise StateError(
            "loader state belongs to another loader configuration: " + "; ".join(differences)
        )


def _normalise(value: Any) -> Any:
    """Tuples and lists compare equal (msgpack turns tuples into lists)."""
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    return value


def check_state_shape(template: Any, state: Any) -> None:
    """Refuse ``state`` where its stage chain differs from ``template`` (a fresh state of the
    same chain): another stage, a missing key, a truncated nesting. No I/O: buffered
    samples are not fetched here, only when a worker restores."""
    if not isinstance(template, dict):
        return
    expected = template.get("type")
    if not isinstance(state, dict):
        raise StateError(
            f"{expected}: state must be a dict, got {type(state).__name__}; it is corrupt"
        )
    if state.get("type") != expected:
        raise StateError(
            f"{expected}: state belongs to stage {state.get('type')!r}, not {expected!r}; "
            "was it saved by a loader with other stages (packing, grouping, blend)?"
        )
    missing = sorted(set(template) - set(state))
    if missing:
        raise StateError(f"{expected}: state is missing {missing}; it is truncated or corrupt")
    if "source" in template:
        check_state_shape(template["source"], state["source"])
    if "sources" in template:
        sources = state["sources"]
        if not isinstance(sources, list) or len(sources) != len(template["sources"]):
            raise StateError(f"{expected}: state has another number of sources; it is corrupt")
        for fresh, saved in zip(template["sources"], sources):
            check_state_shape(fresh, saved)
