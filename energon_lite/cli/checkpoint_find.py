"""Find the loader states inside what a trainer saved.

A trainer's checkpoint is rarely the bare state: ``torch.save({"step": 7, "model": ...,
"dataloader": loader.save_state_rank()})``, Megatron's ``{"dataloader_state_dict": ...}``,
or every rank's state as a list or a dict (``{"rank0": ..., "rank1": ...}``). The commands
look for the states in nested dicts and lists (or at ``--key path.to.state``) and say where
they found them; a file with none, or with several places that hold states, is an error
naming what is there.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from typing import Any

from energon_lite.errors import StateError, short_repr
from energon_lite.loader.stateful import form_step, is_stateful_form, rank_states

_MAX_DEPTH = 8  # how deep a trainer checkpoint nests its parts
_MAX_NODES = 100_000  # containers visited at most (a crafted file may hold millions)

Path_ = tuple[str | int, ...]


@dataclass
class Found:
    """The rank states (in rank order) found at ``path`` of the file's content."""

    states: list[Any]
    path: Path_  # () when the file is the state (or the list of states) itself
    form: str  # "one": a rank's state; "list" / "dict" of rank states; "stateful": state_dict()
    step: int | None = None  # batches delivered, where the states say (a loader's state_dict())

    @property
    def where(self) -> str:
        return key_text(self.path)


def key_text(path: Path_) -> str:
    """``dataloader.0`` for ``("dataloader", 0)``; ``(the whole file)`` for ``()``."""
    return ".".join(str(p) for p in path) if path else "(the whole file)"


def is_loader_state(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") == "SavableLoader"


def _natural(text: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def _as_states(value: Any) -> tuple[list[Any], str] | None:
    """The rank states ``value`` is (one state, a list or a dict of them, or a loader's
    ``state_dict()`` with every rank's), or None."""
    if is_stateful_form(value):
        return rank_states(value), "stateful"
    if is_loader_state(value):
        return [value], "one"
    if isinstance(value, list) and value and all(is_loader_state(v) for v in value):
        return list(value), "list"
    # a dict of ranks has two or more ({"dataloader_state_dict": state} is one state's key)
    if isinstance(value, dict) and len(value) > 1 and all(map(is_loader_state, value.values())):
        ranks = [v["config"].get("rank") if isinstance(v.get("config"), dict) else None
                 for v in value.values()]  # fmt: skip
        numbers = [r for r in ranks if isinstance(r, int)]
        if len(numbers) == len(ranks) and len(set(numbers)) == len(numbers):
            order = sorted(range(len(numbers)), key=lambda i: numbers[i])
        else:
            keys = [str(k) for k in value]
            order = sorted(range(len(keys)), key=lambda i: _natural(keys[i]))
        items = list(value.values())
        return [items[i] for i in order], "dict"
    return None


def _at_key(data: Any, key: str, source: str) -> tuple[Any, Path_]:
    node: Any = data
    path: Path_ = ()
    for part in key.split("."):
        if isinstance(node, dict):
            match = [k for k in node if str(k) == part]
            if not match:
                raise StateError(
                    f"{source}: --key {key}: {key_text(path)} has no key {part!r}; its keys: "
                    f"{short_repr(sorted(str(k) for k in node)[:20])}"
                )
            node, path = node[match[0]], (*path, match[0])
        elif isinstance(node, list):
            if not part.lstrip("-").isdigit() or not -len(node) <= int(part) < len(node):
                raise StateError(
                    f"{source}: --key {key}: {key_text(path)} is a list of {len(node)} items; "
                    f"{part!r} is not an index into it"
                )
            node, path = node[int(part)], (*path, int(part))
        else:
            raise StateError(
                f"{source}: --key {key}: {key_text(path)} is a {type(node).__name__}, which "
                f"has no {part!r}"
            )
    return node, path


def _found(node: Any, path: Path_, got: tuple[list[Any], str]) -> Found:
    return Found(got[0], path, got[1], form_step(node) if got[1] == "stateful" else None)


def find_states(data: Any, source: str, key: str | None = None) -> Found:
    """The loader states in ``data`` (read from ``source``); StateError when there are none
    or when several places hold some (``key`` then picks one)."""
    if key:
        node, path = _at_key(data, key, source)
        got = _as_states(node)
        if got is None:
            raise StateError(
                f"{source}: --key {key}: {short_repr(node)} is not an energon_lite loader "
                "state (what loader.save_state_rank() returns) nor a list or dict of them"
            )
        return _found(node, path, got)
    found: list[Found] = []
    queue: deque[tuple[Any, Path_]] = deque([(data, ())])
    visited = 0
    while queue and visited < _MAX_NODES:
        node, path = queue.popleft()
        visited += 1
        got = _as_states(node)
        if got is not None:
            found.append(_found(node, path, got))
            continue
        if len(path) >= _MAX_DEPTH:
            continue
        if isinstance(node, dict):
            queue.extend((v, (*path, k)) for k, v in node.items() if isinstance(v, dict | list))
        elif isinstance(node, list):
            queue.extend((v, (*path, i)) for i, v in enumerate(node) if isinstance(v, dict | list))
    if len(found) == 1:
        return found[0]
    if found:
        places = ", ".join(f"{f.where} ({len(f.states)} rank(s))" for f in found[:10])
        raise StateError(
            f"{source}: loader states in {len(found)} places: {places}; pass --key with the "
            "one to use"
        )
    top = (
        f"its top-level keys: {short_repr(sorted(str(k) for k in data)[:20])}"
        if isinstance(data, dict)
        else f"it holds a {type(data).__name__}"
    )
    raise StateError(
        f"{source}: no energon_lite loader state in it (searched nested dicts and lists; "
        f"{top}). A loader state is what loader.save_state_rank() returns; if the trainer "
        "stored it in another shape, pass --key path.to.state"
    )
