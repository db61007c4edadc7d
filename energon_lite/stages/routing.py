"""Fetching through a stage with several sources: route a key to the leaf that made it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from energon_lite.errors import StateError, short_repr
from energon_lite.stages.base import Stage
from energon_lite.state.restore_key import IndexKey, PackKey, SampleKey, SubKey, sample_keys


def fetch_by_leaf(stage: str, by_leaf: Mapping[int, Stage], restore_key: Any) -> Any:
    """``by_leaf[key.leaf].fetch(key)``; a StateError naming the stage for a foreign key."""
    leaf = leaf_of(restore_key)
    source = by_leaf.get(leaf) if leaf is not None else None
    if source is None:
        raise StateError(
            f"{stage}: restore key {short_repr(restore_key)} names no leaf of this blend "
            f"(leaves {sorted(by_leaf)})"
        )
    return source.fetch(restore_key)


def leaf_of(restore_key: Any) -> int | None:
    """The leaf a key was read from: a pack's or sub-item's first sample's; a batch's (the
    list of its items' keys, from a wrapped batched chain) its first item's."""
    if isinstance(restore_key, list) and restore_key:
        restore_key = restore_key[0]
    if isinstance(restore_key, (PackKey, SubKey, IndexKey)):
        samples = sample_keys(restore_key)
        restore_key = samples[0] if samples else None
    return restore_key.leaf if isinstance(restore_key, SampleKey) else None


def by_leaf(sources: Sequence[Stage]) -> dict[int, Stage]:
    """Each leaf id to the source whose chain reads it: a Reader is its own leaf; a chain
    built by a wrapper (``energon_lite.wrappers``) holds the Readers of its leaves below."""
    routes: dict[int, Stage] = {}
    for source in sources:
        pending = [source]
        while pending:
            stage = pending.pop()
            leaf = getattr(stage, "leaf_id", None)
            if leaf is not None:
                routes[leaf] = source
            else:
                pending.extend(stage._parents())
    return routes
