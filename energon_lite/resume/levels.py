"""The stage levels of a saved worker state, and what a level's buffered keys hold.

A worker's state is a tree of stage levels (``{"type", <fields>, "source" | "sources"}``);
everything that reads a saved state without building a chain (the checks of a whole run's
states, an elastic restore, ``loader.mix()``, ``checkpoint info``) walks it here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def walk_states(tree: Any) -> Iterator[dict[str, Any]]:
    """Every stage level of a worker state, parents after children's order: depth first."""
    if isinstance(tree, dict):
        yield tree
        if "source" in tree:
            yield from walk_states(tree["source"])
        for child in tree.get("sources") or []:
            yield from walk_states(child)


def holds_sub_key(plain: Any) -> bool:
    """Whether a plain restore key holds a SubKey anywhere."""
    if isinstance(plain, list) and plain:
        return plain[0] == "sub" or any(holds_sub_key(x) for x in plain[1:])
    return False
