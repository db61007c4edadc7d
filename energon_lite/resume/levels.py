"""The stage levels of a saved worker state, and the stage classes that read them.

A worker's state is a tree of stage levels (``{"type", <fields>, "source" | "sources"}``);
everything that reads a saved state without building a chain (the checks of a whole run's
states, an elastic restore, ``loader.mix()``, ``checkpoint info``) walks it here.

What a level holds is said by its stage class (``held_keys``, ``elastic_state`` ... in
:mod:`energon_lite.stages.base`). A restore asks the classes through one table,
:class:`StageClasses` (``classes.of(level)``), resolved once by whoever starts it: the loader
from its own chain's plan, the offline commands from the registry
(:func:`registered_classes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from energon_lite.stages.base import Stage, stage_class


class StageClasses(dict[str, type[Stage]]):
    """A saved level's stage class by its ``"type"``."""

    def of(self, level: Mapping[str, Any]) -> type[Stage] | None:
        """The stage class of a saved ``level``; None for a type the table does not have."""
        name = level.get("type")
        return self.get(name) if isinstance(name, str) else None


def walk_states(tree: Any) -> Iterator[dict[str, Any]]:
    """Every stage level of a worker state, parents after children's order: depth first.
    A level's parents that are not a level or a list of them are not walked (the shape
    check names them)."""
    if isinstance(tree, dict):
        yield tree
        if "source" in tree:
            yield from walk_states(tree["source"])
        sources = tree.get("sources")
        for child in sources if isinstance(sources, list) else []:
            yield from walk_states(child)


def registered_classes(trees: Iterable[Any]) -> StageClasses:
    """The stage class of every level in ``trees`` that the registry knows
    (:func:`energon_lite.stages.base.stage_class`): the table where states are read
    without a chain (``energon-lite checkpoint redist``, the test helpers)."""
    out = StageClasses()
    for tree in trees:
        for level in walk_states(tree):
            name = level.get("type")
            if isinstance(name, str) and name not in out:
                cls = stage_class(name)
                if cls is not None:
                    out[name] = cls
    return out


def holds_sub_key(plain: Any) -> bool:
    """Whether a plain restore key holds a SubKey anywhere."""
    if isinstance(plain, list) and plain:
        return plain[0] == "sub" or any(holds_sub_key(x) for x in plain[1:])
    return False
