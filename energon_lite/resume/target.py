"""What a saved state must match in the loader that restores it.

The loader describes itself once per restore as a :class:`RestoreTarget`; everything in
:mod:`energon_lite.resume` that compares a state with a loader reads it from there, so no
module here needs the loader (which sits above) or builds a chain.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from energon_lite.resume.levels import StageClasses
from energon_lite.resume.ownership import LeafPlan
from energon_lite.stages.reader import Reader
from energon_lite.worker import CanonicalLayout, WorkerConfig, WorkerSlot


def _no_leaves() -> list[LeafPlan] | None:
    return None


def _no_readers() -> list[Reader] | None:
    return None


def _no_fresh(slot: WorkerSlot) -> dict[str, Any] | None:
    return None


@dataclass(frozen=True)
class RestoreTarget:
    """The loader a state is restored into."""

    worker_config: WorkerConfig
    config: dict[str, Any]  # its dataset.config(): what a state must match
    shape: Callable[[WorkerSlot], dict[str, Any]]  # a worker chain's declared state shape
    paths: list[str]  # the datasets it reads (messages only)
    # the stage class of each level its chains save (Pipeline.plan), by the level's "type":
    # what every module here asks about a saved level (held_keys, elastic_state ...)
    stages: StageClasses
    batches_per_pass: int | None = None  # virtual_epoch_length: in_pass may not exceed it
    canonical: CanonicalLayout | None = None  # the canonical layout its layout reproduces
    # each leaf's plan (:func:`energon_lite.resume.ownership.check_ownership`), None for a
    # chain composed by hand; asked only when states of a whole run are restored
    leaves: Callable[[], list[LeafPlan] | None] = _no_leaves
    # the Readers of the first worker (each leaf's samples), None for a chain composed by
    # hand; and a worker's chain state at its start: what a state of another library (an
    # Energon state, :mod:`energon_lite.resume.energon_state`) is rebuilt from
    readers: Callable[[], list[Reader] | None] = _no_readers
    fresh: Callable[[WorkerSlot], dict[str, Any] | None] = _no_fresh
