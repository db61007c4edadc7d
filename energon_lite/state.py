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
