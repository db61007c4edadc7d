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


def _weight_text(weight: Any) -> str:
    """A number as it is; a schedule (``[[[at, weight], ...], interpolate]``) in words."""
    if isinstance(weight, (int, float)) and not isinstance(weight, bool):
        return f"{weight:g}"
    if (
        isinstance(weight, list)
        and len(weight) == 2
        and isinstance(weight[0], list)
        and all(isinstance(p, list) and len(p) == 2 for p in weight[0])
    ):
        points = ", ".join(f"{short_repr(v)} at step {short_repr(a)}" for a, v in weight[0][:8])
        more = f" and {len(weight[0]) - 8} more points" if len(weight[0]) > 8 else ""
        return f"schedule ({short_repr(weight[1])}): {points}{more}"
    return short_repr(weight)


def _path_text(name: Any) -> str:
    """A dataset's path in full (a user reads it to find the data); only an oversized or
    non-string value from a crafted state is shortened."""
    if isinstance(name, str) and len(name) <= 1024:
        return repr(name)
    return short_repr(name)


def describe_config(state: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """The loader's settings, one per line; its datasets by the paths the state names (with
    each one's content digest), the blend's weights or schedules in words, and the step."""
    names = state.get("paths")
    datasets = config.get("datasets")
    weights = config.get("weights")
    lines = []
    if isinstance(datasets, list) and isinstance(names, list) and len(names) == len(datasets):
        lines.append("  datasets:")
        for i, (name, digest) in enumerate(zip(names, datasets)):
            weight = weights[i] if isinstance(weights, list) and i < len(weights) else None
            how = "" if weight is None else f", weight {_weight_text(weight)}"
            lines.append(f"    {_path_text(name)} (content {short_repr(digest)}){how}")
    shown = ("datasets", "weights") if lines else ()
    lines += [f"  {k}: {short_repr(v)}" for k, v in config.items() if k not in shown]
    if isinstance(state.get("in_pass"), int):
        lines.append(f"  step: {state['in_pass']} batches delivered in pass {state.get('epoch')}")
    return lines
