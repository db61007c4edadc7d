"""The ``canonical_layout`` option: checked, and which guarantee this layout gives.

``get_train_dataset(..., canonical_layout=(K, Q))`` defines the run's global batches on K
ranks x Q workers (:class:`energon_lite.worker.CanonicalLayout`). A layout of R ranks x W
workers with R | K and W | Q runs the K x Q logical pipelines (``stages/phases.py``) and
gives the canonical global batches; any other layout runs chains of its own and delivers
every sample once, in an order of its own. :func:`canonical_for` checks the option and says
once which guarantee holds.

Moving states between layouts of one run is :mod:`energon_lite.resume.relayout`.
"""

from __future__ import annotations

import logging
from typing import Any

from energon_lite.errors import ConfigError, short_repr
from energon_lite.task_encoder.base import DefaultTaskEncoder, TaskEncoder
from energon_lite.worker import CanonicalLayout, WorkerConfig

log = logging.getLogger(__name__)


def canonical_for(
    option: Any,
    wc: WorkerConfig,
    batch_size: int | None,
    task_encoder: TaskEncoder | None,
    bucket_sync: Any = None,
) -> CanonicalLayout | None:
    """``get_train_dataset(canonical_layout=...)`` checked, as a layout (None: this layout
    defines the batches, as without the option). Logs which guarantee this layout gives."""
    if option is None:
        return None
    if (
        not isinstance(option, (tuple, list))
        or len(option) != 2
        or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in option)
    ):
        raise ConfigError(
            f"canonical_layout={short_repr(option)} must be (ranks, workers), two integers >= 1"
        )
    layout = CanonicalLayout(int(option[0]), int(option[1]))
    here = f"{wc.world_size} ranks x {wc.num_workers} workers"
    if not layout.reproduced_by(wc.world_size, wc.num_workers):
        log.warning(
            "canonical_layout=(%d, %d) on %s, which do not divide it: this run delivers every "
            "sample exactly once, in an order of its own layout; a layout whose ranks divide "
            "%d and whose workers (0 counts as 1) divide %d gives the canonical global batches",
            layout.ranks, layout.workers, here, layout.ranks, layout.workers,
        )  # fmt: skip
        return layout
    per_phase = layout.ranks // wc.world_size
    te = task_encoder if task_encoder is not None else DefaultTaskEncoder()
    grouped = te.overrides("batch_group_criterion")
    if batch_size is None and not grouped:
        raise ConfigError(
            f"canonical_layout={tuple(option)} needs batching (a batch_size, or a "
            "batch_group_criterion): a step is one batch of every canonical rank"
        )
    if batch_size is not None and not grouped and batch_size % per_phase:
        raise ConfigError(
            f"canonical_layout={tuple(option)} on {wc.world_size} ranks: batch_size="
            f"{batch_size} per rank is a global batch of {batch_size * wc.world_size}, which "
            f"{layout.ranks} canonical ranks cannot share evenly; use a batch_size that is a "
            f"multiple of {per_phase} (keep world_size x batch_size, a multiple of {layout.ranks})"
        )
    if grouped and per_phase > 1 and not bucket_sync:
        raise ConfigError(
            f"canonical_layout={tuple(option)} on {wc.world_size} ranks joins {per_phase} "
            "canonical ranks' batches into one, so their buckets must agree at every step: "
            "set bucket_sync={'weights': {bucket: weight}} with batch_group_criterion"
        )
    log.info(
        "canonical_layout=(%d, %d) on %s: the global batches are the canonical layout's "
        "(each worker runs %d of its %d logical pipelines)",
        layout.ranks, layout.workers, here,
        per_phase * (layout.workers // wc.workers_per_rank), layout.ranks * layout.workers,
    )  # fmt: skip
    return layout
