"""``Node``: one stage of a worker chain before it is built.

The pipeline describes a worker's chain as a tree of nodes (a stage class and how to make
it from its parents). ``build()`` makes the stages, and the context they share (``ChainContext``); ``shape()`` is the state shape the chain
declares, which the trainer checks a saved state against without building anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from energon_lite.stages.base import Stage
from energon_lite.task_encoder.chain_context import ChainContext


@dataclass
class Node:
    """One stage of a worker chain before it is built: its class and how to make it.

    ``build()`` makes the stages (no I/O: constructors only store settings);
    ``shape()`` is the state shape the chain declares (``Stage.STATE_KEYS`` of each class),
    which the trainer checks a saved state against without building anything.
    """

    cls: type[Stage]
    make: Callable[..., Stage]  # make(parent) / make([parents]) / make()
    parents: list[Node] = field(default_factory=list)
    several: bool = False  # the parents are handed over as one list (blends)
    # what the stage is made with, for the views derived from the plan (Energon's tree of
    # wrapper datasets: loader/energon_tree.py): {"batch_size": 4, "collate": te.batch} ...
    settings: dict[str, Any] = field(default_factory=dict)

    def build(self) -> Stage:
        """The chain, its stages sharing one new :class:`ChainContext`."""
        chain = self._make()
        chain.bind(ChainContext())
        return chain

    def _make(self) -> Stage:
        built = [parent._make() for parent in self.parents]
        return self.make(built) if self.several else self.make(*built)

    def nodes(self) -> list[Node]:
        """Every node of the plan, this one first, then its parents' (depth first)."""
        out, pending = [], [self]
        while pending:
            node = pending.pop()
            out.append(node)
            pending.extend(reversed(node.parents))
        return out

    def shape(self) -> dict[str, Any]:
        shape: dict[str, Any] = {"type": self.cls.__name__, "keys": list(self.cls.STATE_KEYS)}
        if self.cls.OPTIONAL_KEYS:
            shape["optional"] = list(self.cls.OPTIONAL_KEYS)
        if self.cls.LAZY_SOURCES:
            shape["fresh_sources"] = True
        if self.several:
            shape["sources"] = [parent.shape() for parent in self.parents]
        elif self.parents:
            shape["source"] = self.parents[0].shape()
        return shape
