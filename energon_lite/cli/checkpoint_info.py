"""What ``energon-lite checkpoint info`` says about layouts, buffers and elastic leftovers."""

from __future__ import annotations

from typing import Any

from energon_lite.errors import StateError
from energon_lite.stages.elastic import walk_states
from energon_lite.state.restore_key import from_plain, sample_keys


def describe_layout(states: list[Any]) -> str:
    """``"N ranks x M workers, pass E"`` for a list of rank states (empty if not states)."""
    first = states[0] if states else None
    if not isinstance(first, dict) or not isinstance(first.get("config"), dict):
        return ""
    config = first["config"]
    return (
        f"layout: {len(states)} ranks x {config.get('num_workers')} workers "
        f"(saved with world_size={config.get('world_size')}), pass {first.get('epoch')}\n\n"
    )


def describe_work(tree: Any) -> str:
    """One worker state in a line: fresh, or its buffered samples and any leftover."""
    if tree is None:
        return "fresh"
    try:
        buffered = 0
        left = []
        for level in walk_states(tree):
            for name in ("keys", "buffer"):
                if level.get("type") in ("ShuffleBuffer", "Pack") and name in level:
                    buffered += sum(len(sample_keys(from_plain(k))) for k in level[name])
            if level.get("type") == "Pack":
                buffered += sum(
                    len(sample_keys(from_plain(k))) for g in level["pending"] for k in g
                )
            if level.get("type") == "GroupBatch":
                buffered += sum(
                    len(sample_keys(from_plain(k))) for b in level["buckets"] for k in b
                )
            if level.get("type") == "Reader" and isinstance(level.get("left"), dict):
                lv = level["left"]
                left.append(
                    f"leftover of an elastic restore: {len(lv['keys']) - lv['k']} samples to "
                    f"replay, {len(lv['segs']) - lv['s']} unfinished epoch segment(s) of "
                    f"{lv['G']} old workers"
                )
        return "; ".join([f"buffered samples: {buffered}", *left])
    except (StateError, KeyError, TypeError, AttributeError):
        return "(unreadable buffers)"
