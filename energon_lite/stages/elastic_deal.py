"""What a stage is handed when an elastic restore builds its state on another layout.

An elastic restore (:mod:`energon_lite.resume.elastic`) deals the old layout's unfinished
work to the new workers and asks each stage class for its own fields on the new layout
(``Stage.elastic_state(level, deal)``). The deal is the one thing a stage sees of it: the
new worker it builds, the layouts' sizes, the pass, and per leaf the work a reader owes
first (:mod:`energon_lite.stages.leftover`). Stages never see a rank state.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple


class LeafWork(NamedTuple):
    """One leaf's part of the old layout's unfinished work, for one new worker."""

    keys: list[list[Any]]  # plain sample keys from the old buffers, dealt to this worker
    segs: list[dict[str, Any]]  # unfinished reader-epoch segments (every new worker gets all)
    last_epoch: int  # the latest reader epoch any old worker was in


@dataclass
class ElasticDeal:
    """What a stage's ``elastic_state`` may ask while one new worker's state is built."""

    worker: int  # the new global worker
    workers: int  # new global workers
    old_workers: int  # old global workers
    epoch: int  # the loader's pass
    blend_epoch: int  # the blend epoch after the latest one any old worker was in
    reader_repeat: bool  # readers go on to further epochs after the leftover
    leaves: Iterator[LeafWork]  # per leaf, in the order the readers appear in a state
    delivered: int = 0  # batches each old rank had delivered (a blend schedule's step)

    def next_leaf(self) -> LeafWork:
        """The next leaf's work (each Reader level takes one, depth first)."""
        return next(self.leaves)
