"""Fetching through a stage with several sources: route a key to the leaf that made it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from energon_lite.errors import StateError, short_repr
from energon_lite.restore_key import SampleKey
from energon_lite.stage import Stage


def fetch_by_leaf(stage: str, by_leaf: Mapping[int, Stage], restore_key: Any) -> Any:
    """``by_leaf[key.leaf].fetch(key)``; a StateError naming the stage for a foreign key."""
    source = by_leaf.get(restore_key.leaf) if isinstance(restore_key, SampleKey) else None
    if source is None:
        raise StateError(
            f"{stage}: restore key {short_repr(restore_key)} names no leaf of this blend "
            f"(leaves {sorted(by_leaf)})"
        )
    return source.fetch(restore_key)
