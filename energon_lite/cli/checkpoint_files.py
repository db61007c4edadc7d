"""A checkpoint on disk: one state file per rank in a folder, or one file with every rank's.

``read_checkpoint(path)`` gives the rank states in rank order, and how they were stored;
``write_checkpoint`` writes new rank states the same way (same format, file names with the
rank number changed), which ``energon-lite checkpoint redist`` uses. Files are read as plain
data only (:mod:`energon_lite.cli.state_file`): nothing in them ever runs. A file may be a
trainer's checkpoint with the loader state inside (:mod:`energon_lite.cli.checkpoint_find`);
the new states are then written under the same keys, without the rest of the checkpoint.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from energon_lite.cli.checkpoint_dcp import is_dcp_folder, read_dcp, write_dcp
from energon_lite.cli.checkpoint_find import Found, Path_, find_states
from energon_lite.cli.state_file import read_state_file
from energon_lite.errors import StateError
from energon_lite.loader.stateful import stateful_form
from energon_lite.state.codec import encode_state
from energon_lite.state.compact import unpacked
from energon_lite.state.upgrade import upgrade_state


@dataclass
class Checkpoint:
    states: list[Any]  # one loader state per rank, in rank order
    names: list[str]  # the file of each rank, or one name for a single list file
    fmt: str  # "msgpack", "json", "torch" or "dcp" (a torch.distributed.checkpoint folder)
    one_file: bool = False  # every rank's state in one file, as a list
    key: Path_ = ()  # where in each file the state (or the list of states) was found
    step: int | None = None  # batches delivered, in a loader's state_dict()
    stateful: bool = False  # the states were a loader's state_dict() (written back as one)

    @property
    def where(self) -> str:
        """Where the states were found, for messages ("" when the file is the state)."""
        return ".".join(str(k) for k in self.key)


def _natural(name: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _format(path: Path) -> str:
    with open(path, "rb") as file:  # read_state_file read it already: a regular file
        head = file.read(64)
    if head[:2] == b"PK":
        return "torch"
    return "json" if head.lstrip()[:1] in (b"{", b"[") else "msgpack"


def _read(path: Path, key: str | None) -> Found:
    return find_states(read_state_file(path), str(path), key)


def _per_rank(files: list[Path], key: str | None, where: Path) -> Checkpoint:
    found = [_read(f, key) for f in files]
    if len(files) == 1 and found[0].form != "one":
        return _one_file(found[0], files[0].name, _format(files[0]))
    for f, got in zip(files, found):
        if got.form != "one":
            raise StateError(
                f"{f}: holds {len(got.states)} ranks' states at {got.where}; {where} mixes "
                "per-rank files and files with every rank's states: give one or the other"
            )
    if len({got.path for got in found}) > 1:
        raise StateError(
            f"{where}: the rank files keep their states under different keys "
            f"({', '.join(sorted({got.where for got in found}))}); pass --key"
        )
    return Checkpoint(
        [got.states[0] for got in found],
        [f.name for f in files],
        _format(files[0]),
        key=found[0].path,
    )


def _one_file(found: Found, name: str, fmt: str) -> Checkpoint:
    stateful = found.form == "stateful"
    return Checkpoint(found.states, [name], fmt, True, found.path, found.step, stateful)


def read_checkpoint(path: str | Path | list[Path], key: str | None = None) -> Checkpoint:
    """A folder of per-rank state files (ordered by the numbers in their names), one file
    holding one state or every rank's (a list or a dict), or a list of per-rank files in rank
    order (Energon's ``redist`` form). Each file may be a trainer checkpoint with the states
    inside, found in nested dicts and lists or at ``key`` (``path.to.state``)."""
    if isinstance(path, list):
        found = _per_rank(path, key, path[0].parent)
    elif is_dcp_folder(Path(path)):  # dcp.save({"dataloader": loader, ...}): the loader's keys
        found = _one_file(find_states(read_dcp(Path(path)), str(path), key), "", "dcp")
    else:
        path = Path(path)
        files = [path]
        if path.is_dir():
            files = sorted(
                (p for p in path.iterdir() if p.is_file()), key=lambda p: _natural(p.name)
            )
            if not files:
                raise StateError(f"{path}: no state files in this folder")
        found = _per_rank(files, key, path)
    # today's form (a version this library does not read stays as it is, to be described)
    found.states = [upgrade_state(unpacked(state), strict=False) for state in found.states]
    return found


def _wrap(key: Path_, value: Any) -> tuple[Any, bool]:
    """``value`` under the same dict keys it was found at; (value, False) when a list index
    is on the way (the states are then written bare)."""
    if any(not isinstance(k, str) for k in key):
        return value, False
    for k in reversed(key):
        value = {k: value}
    return value, True


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
    if old.stateful:  # a loader's state_dict(): the new layout's, at the same step
        step = old.step or 0
        encoded = [encode_state(state) for state in states]
        value, _ = _wrap(old.key, stateful_form(encoded, [step] * len(states), len(states)))
        if old.fmt == "dcp":
            write_dcp(out, value)
            return [out]
        old, states = Checkpoint([], old.names, old.fmt, True), value  # one file, as it was
    out.mkdir(parents=True, exist_ok=True)
    targets: list[tuple[Path, Any]]
    if old.one_file:
        targets = [(out / old.names[0], states)]
    else:
        targets = [(out / rank_name(old.names[0], r), s) for r, s in enumerate(states)]
    for target, bare in targets:
        value, _ = _wrap(old.key, bare)
        if old.fmt == "torch":
            import torch

            torch.save(value, target)
        elif old.fmt == "json":
            target.write_text(json.dumps(value))
        else:
            target.write_bytes(encode_state(value))
    return [target for target, _ in targets]
