"""What ``energon-lite checkpoint info`` says about layouts, buffers and elastic leftovers."""

from __future__ import annotations

from typing import Any

from energon_lite.errors import StateError, short_repr
from energon_lite.resume.levels import walk_states
from energon_lite.stages.base import stage_class
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
    """One worker state in a line: fresh, or its buffered samples and what each stage adds
    (an elastic restore's leftover); each stage's class says what its level holds."""
    if tree is None:
        return "fresh"
    try:
        buffered = 0
        notes = []
        for level in walk_states(tree):
            cls = stage_class(level.get("type"))
            if cls is None:  # e.g. a user's stage whose module this process did not import
                notes.append(f"stage {short_repr(level.get('type'))} unknown here: not counted")
                continue
            buffered += sum(len(sample_keys(from_plain(k))) for k in cls.held_keys(level))
            notes += cls.describe_level(level)
        return "; ".join([f"buffered samples: {buffered}", *notes])
    except (StateError, KeyError, TypeError, AttributeError):
        return "(unreadable buffers)"
