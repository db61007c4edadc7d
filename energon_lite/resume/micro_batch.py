"""Restoring into another micro-batch size (Energon's ``checkpoint redist`` scenario that halves
it and doubles the gradient accumulation).

A worker's state is taken between two of its batches, and no stage below the batching stage
depends on the batch size: each worker's stream of samples is the same whatever size its
batches are cut to, so a state continues in batches of a smaller size that divides the saved
one, as Energon allows. Each worker continues its own stream exactly; the run's global
batches keep their samples where each rank's accumulation steps visit its workers as before
(in Energon's scenario: micro-batch 2 -> 1 with the gradient accumulation doubled). The
batching stage keeps its count of batches, which the hooks read as ``current_batch_index``,
as Energon's does.

Refused, naming the reason: a larger size or one that does not divide the saved one (as
Energon refuses them: one new micro-batch would take samples of several old ones, so the
global batches change), batching turned on or off (the chain has another stage), composed
batches (``batch_composition``: the blend composes each batch by its size), a ``limit``
(counted in batches) and a canonical layout (whose global batch must stay the same:
:mod:`energon_lite.resume.relayout`).
"""

from __future__ import annotations

from typing import Any

_SIZE = "batch_size"


def comparable_config(saved: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """``current`` (a loader's ``dataset.config()``) as a state saved with ``saved`` must match
    it: with the saved ``batch_size`` where the loader may continue the state in batches of
    its own size (else as it is, so that the size is named with every other difference)."""
    if _SIZE in saved and _SIZE in current and refusal(saved, current) is None:
        return {**current, _SIZE: saved[_SIZE]}
    return current


def refusal(saved: dict[str, Any], current: dict[str, Any]) -> str | None:
    """Why a state saved with ``saved`` may not continue in ``current``'s batch size; None
    when the sizes are equal or it may."""
    old, new = saved.get(_SIZE), current.get(_SIZE)
    if old == new:
        return None
    if "canonical_layout" in current or "canonical_layout" in saved:
        return (
            "under a canonical layout the per-rank batch size changes with the number of "
            "ranks, through restore_state_global (the global batch stays the same)"
        )
    if old is None or new is None:
        return "a state continues in another batch size, not with batching turned on or off"
    if not _is_size(old) or not _is_size(new):
        return f"batch_size must be a positive whole number (state: {old!r}, loader: {new!r})"
    if new > old or old % new:
        return (
            "a state continues in a smaller micro-batch size that divides the saved one (as "
            "in Energon), so that each global batch keeps its samples"
        )
    for config in (saved, current):
        if "batch_composition" in config:
            return (
                f"batch_composition {config['batch_composition']} composes each batch by its "
                "size; restore with the batch size the state was saved with"
            )
        if config.get("limit") is not None:
            return (
                f"limit={config['limit']} counts batches; restore with the batch size the "
                "state was saved with"
            )
    return None


def _is_size(value: object) -> bool:
    """A batch size a state may hold: a positive ``int`` (a crafted state may hold anything)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
