"""Whether a saved configuration fits the loader that restores it.

A rank state records its loader's configuration (``dataset.config()`` with rank, world_size
and num_workers); a loader continues a state only where every setting is the same
(:func:`check_same_config` names every difference), apart from what may change:

* the layout, where every rank's states move to this one (``restore_state_global``): rank,
  world_size and num_workers; between layouts of one canonical run also the per-rank batch
  size, as long as the global batch stays the same (:func:`check_run_config`);
* the micro-batch size, continued in a smaller size that divides the saved one (Energon's
  ``checkpoint redist`` scenario that halves it and doubles the gradient accumulation).

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
:mod:`energon_lite.resume.relayout`). A refusal says what to do about it: the datasets the
state was read from, the batch size, ``restore_state_global`` for another layout.
"""

from __future__ import annotations

from typing import Any

from energon_lite.errors import StateError, short_repr
from energon_lite.worker import CanonicalLayout

_SIZE = "batch_size"
LAYOUT = ("rank", "world_size", "num_workers")  # what a state moved to this layout changes
# what differs between layouts of one canonical run; everything else in a config must be equal
_PER_LAYOUT = (*LAYOUT, _SIZE, "canonical_layout")


def check_fits(
    saved: dict[str, Any], paths: Any, current: dict[str, Any], current_paths: list[str]
) -> None:
    """StateError unless a rank state saved with ``saved`` continues in a loader of
    ``current`` (reading ``current_paths``): every setting the same, the micro-batch size
    aside where it may change; the error says what to do about it (``paths``: where the
    state was read from)."""
    try:
        check_same_config(saved, comparable_config(saved, current))
    except StateError as exc:
        raise StateError(f"{exc}{_mismatch_hint(saved, paths, current, current_paths)}") from None


def check_run_config(
    saved: dict[str, Any], paths: Any, current: dict[str, Any], current_paths: list[str]
) -> None:
    """StateError unless every rank's state of a run saved with ``saved`` (one configuration,
    :func:`energon_lite.resume.rank_state.read_run`) continues in a loader of ``current``
    once moved to its layout: between layouts of one canonical run the settings other than
    the layout, and the global batch size (:mod:`energon_lite.resume.relayout`); else every
    setting but the layout (:func:`check_fits`)."""
    old = saved.get("canonical_layout")
    here = current.get("canonical_layout")
    reproduces = here is not None and CanonicalLayout(*here).reproduced_by(
        current["world_size"], current["num_workers"]
    )
    if reproduces or old is not None:
        refuse_unmovable(saved)
        _check_canonical(saved, current)
        if reproduces or (
            old is not None
            and CanonicalLayout(*old).reproduced_by(saved["world_size"], saved["num_workers"])
        ):
            return  # its states move between layouts of one canonical run
    if any(saved.get(key) != current[key] for key in ("world_size", "num_workers")):
        refuse_unmovable(saved)
    moved = {**saved, **{key: current[key] for key in LAYOUT}}
    check_fits(moved, paths, current, current_paths)


def refuse_unmovable(config: dict[str, Any]) -> None:
    """StateError for a run whose states cannot move to another layout."""
    if "wrapper" in config:  # energon_lite.wrappers: a chain composed by hand
        raise StateError(
            f"elastic restore of a {config['wrapper']} composition is not supported; restore "
            "it on the old number of ranks and workers, or start it over"
        )
    if not config.get("training"):
        raise StateError(
            "elastic restore of a validation/test loader is not supported: its slices are cut "
            "per layout; restore it on the old layout or start it over"
        )
    if config.get("limit") is not None:
        raise StateError(f"elastic restore with limit={config['limit']} is not supported")


def _check_canonical(old: dict[str, Any], current: dict[str, Any]) -> None:
    """The settings other than the layout must match, and the global batch size."""
    check_same_config(
        {**old, **{key: current[key] for key in _PER_LAYOUT if key in current}}, current
    )
    old_size, new_size = old.get(_SIZE), current.get(_SIZE)
    ranks = current["world_size"]
    old_global = None if old_size is None else old_size * old["world_size"]
    new_global = None if new_size is None else new_size * ranks
    if old_global != new_global:
        raise StateError(
            f"loader state has a global batch of {old_size} per rank x {old['world_size']} "
            f"ranks = {old_global}, this loader {new_size} x {ranks} = {new_global}; "
            f"build this layout's loaders with batch_size = {old_global} / ranks"
        )


def check_same_config(saved: Any, current: dict[str, Any]) -> None:
    """Raise StateError naming every setting in which ``saved`` differs from ``current``."""
    if not isinstance(saved, dict):
        raise StateError(f"loader state has no config dict (got {type(saved).__name__}); corrupt")
    differences = [
        f"{key}: state has {short_repr(saved.get(key))}, this loader has {short_repr(current[key])}"
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


def _mismatch_hint(
    saved: dict[str, Any], paths: Any, current: dict[str, Any], current_paths: list[str]
) -> str:
    """What to do about a state saved by another loader (a sentence, or "")."""
    hints = []
    if "datasets" in current and saved.get("datasets") != current["datasets"]:
        where = (
            ", ".join(str(p) for p in paths[:8])
            if isinstance(paths, list) and paths
            else "paths not recorded in this state"
        )
        hints.append(
            f"the state was saved reading {where}; this loader reads "
            f"{', '.join(current_paths)}, whose content differs"
        )
    why = refusal(saved, current)
    if why is not None:
        hints.append(f"the batch size cannot change here: {why}")
    if any(saved.get(k) != current.get(k) for k in ("num_workers", "world_size")):
        hints.append(
            "to resume on another number of ranks or workers, give every rank's state to "
            "loader.restore_state_global(states) (or run energon-lite checkpoint redist)"
        )
    return "".join(f". {hint[0].upper()}{hint[1:]}" for hint in hints)


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
