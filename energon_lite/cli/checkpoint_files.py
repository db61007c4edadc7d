"""A checkpoint on disk: one state file per rank in a folder, or one file with every rank's.

``read_checkpoint(path)`` gives the rank states in rank order, and how they were stored;
``write_checkpoint`` writes new rank states the same way (same format, file names with the
rank number changed), which ``energon-lite checkpoint redist`` uses. Files are read as plain
data only (:mod:`energon_lite.cli.state_file`): nothing in them ever runs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from energon_lite.cli.state_file import read_state_file
from energon_lite.errors import StateError
from energon_lite.state.codec import encode_state


@dataclass
class Checkpoint:
    states: list[Any]  # one loader state per rank, in rank order
    names: list[str]  # the file of each rank, or one name for a single list file
    fmt: str  # "msgpack", "json" or "torch"
    one_file: bool = False  # every rank's state in one file, as a list


def _natural(name: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _format(path: Path) -> str:
    with open(path, "rb") as file:  # read_state_file read it already: a regular file
        head = file.read(64)
    if head[:2] == b"PK":
        return "torch"
    return "json" if head.lstrip()[:1] in (b"{", b"[") else "msgpack"


def read_checkpoint(path: str | Path | list[Path]) -> Checkpoint:
    """A folder of per-rank state files (ordered by the numbers in their names), one file
    holding one state or the list of every rank's, or a list of per-rank files in rank order
    (Energon's ``redist`` form)."""
    if isinstance(path, list):
        states = [read_state_file(f) for f in path]
        if any(isinstance(s, list) for s in states):
            raise StateError(f"{path[0]}: one state per rank file expected, found a list of ranks")
        return Checkpoint(states, [f.name for f in path], _format(path[0]))
    path = Path(path)
    if path.is_dir():
        files = sorted((p for p in path.iterdir() if p.is_file()), key=lambda p: _natural(p.name))
        if not files:
            raise StateError(f"{path}: no state files in this folder")
        states = [read_state_file(f) for f in files]
        if len(files) == 1 and isinstance(states[0], list):
            return Checkpoint(states[0], [files[0].name], _format(files[0]), one_file=True)
        if any(isinstance(s, list) for s in states):
            raise StateError(f"{path}: mixes per-rank files and files with a list of ranks")
        return Checkpoint(states, [f.name for f in files], _format(files[0]))
    state = read_state_file(path)
    if isinstance(state, list):
        return Checkpoint(state, [path.name], _format(path), one_file=True)
    return Checkpoint([state], [path.name], _format(path))


def rank_name(first: str, rank: int) -> str:
    """``first`` (rank 0's file name) with its last number replaced by ``rank``."""
    numbers = list(re.finditer(r"\d+", first))
    if not numbers:
        stem, dot, ext = first.partition(".")
        return f"{stem}_rank_{rank}{dot}{ext}"
    last = numbers[-1]
    return first[: last.start()] + str(rank).zfill(len(last.group())) + first[last.end() :]


def write_checkpoint(old: Checkpoint, states: list[Any], out: str | Path) -> list[Path]:
    """Write ``states`` into folder ``out`` as ``old`` was stored; the paths written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    targets: list[tuple[Path, Any]]
    if old.one_file:
        targets = [(out / old.names[0], states)]
    else:
        targets = [(out / rank_name(old.names[0], r), s) for r, s in enumerate(states)]
    for target, value in targets:
        if old.fmt == "torch":
            import torch

            torch.save(value, target)
        elif old.fmt == "json":
            target.write_text(json.dumps(value))
        else:
            target.write_bytes(encode_state(value))
    return [target for target, _ in targets]
