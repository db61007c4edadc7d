"""The loader states in a ``torch.distributed.checkpoint`` (DCP) folder.

``dcp.save({"dataloader": loader, "model": ...}, checkpoint_id=FOLDER)`` stores the loader's
``state_dict()`` (:mod:`energon_lite.loader.stateful`) flattened into keys
(``dataloader.format``, ``dataloader.rank_states``, ...) next to the model's tensors.
``read_dcp`` finds such groups of keys in the folder's metadata and reads only their
values (never the model), each with ``torch.load(weights_only=True)``: nothing in the
folder runs. ``write_dcp`` writes new loader states as a DCP folder that holds only them,
under the same key, for ``dcp.load({"dataloader": loader}, ...)`` on the new layout.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

from energon_lite.errors import StateError
from energon_lite.loader.stateful import KEYS

METADATA = ".metadata"  # the file every DCP checkpoint folder has


def is_dcp_folder(path: Path) -> bool:
    return path.is_dir() and (path / METADATA).is_file()


def _prefixes(keys: Any) -> list[str]:
    """The key prefixes (``"dataloader."``, or ``""`` at the top) of the loader
    state_dicts among a checkpoint's flattened ``keys``."""
    found = []
    for key in keys:
        if key == "format" or key.endswith(".format"):
            prefix = key[: -len("format")]
            if all(f"{prefix}{name}" in keys for name in KEYS):
                found.append(prefix)
    return sorted(found)


def read_dcp(path: Path) -> dict[str, Any]:
    """The loader state_dicts of DCP folder ``path``, nested under their keys as saved
    (``{"dataloader": {...}}``); StateError when it has none."""
    import torch
    from torch.distributed.checkpoint import FileSystemReader, load
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    class PlainData(DefaultLoadPlanner):
        """DCP's planner, reading non-tensor values as plain data only (the keys of those
        that are not are kept in ``refused``: DCP wraps what a planner raises)."""

        refused: list[str] = []

        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            fqn = read_item.dest_index.fqn
            try:  # into the dict given to load(), which the planner may have copied
                self.original_state_dict[fqn] = torch.load(value, weights_only=True)
            except Exception:  # torch raises UnpicklingError, RuntimeError, ... for objects
                self.refused.append(fqn)

    reader = FileSystemReader(str(path))
    try:
        keys = reader.read_metadata().state_dict_metadata
    except Exception as exc:  # a cut or foreign .metadata file
        raise StateError(f"{path}: its DCP metadata does not read: {exc}") from None
    prefixes = _prefixes(keys)
    if not prefixes:
        shown = sorted({key.split(".")[0] for key in keys})[:20]
        raise StateError(
            f"{path}: a DCP checkpoint without a loader state_dict (its top-level keys: "
            f"{', '.join(shown)}); save it with dcp.save({{'dataloader': loader}}, ...)"
        )
    values: dict[str, Any] = {f"{prefix}{name}": None for prefix in prefixes for name in KEYS}
    planner = PlainData(flatten_state_dict=False, flatten_sharded_tensors=False)
    planner.refused = []
    with warnings.catch_warnings():  # "assuming ... a single process": it is one
        warnings.simplefilter("ignore", UserWarning)
        load(values, storage_reader=reader, planner=planner, no_dist=True)
    if planner.refused:
        raise StateError(
            f"{path}: {', '.join(sorted(planner.refused))} is not plain data "
            "(torch.load(weights_only=True) refuses it); refused: nothing in it runs"
        )
    nested: dict[str, Any] = {}
    for prefix in prefixes:
        form = {name: values[f"{prefix}{name}"] for name in KEYS}
        if not prefix:
            return form
        *outer, last = prefix[:-1].split(".")
        node = nested
        for part in outer:
            node = node.setdefault(part, {})
        node[last] = form
    return nested


def write_dcp(out: Path, value: dict[str, Any]) -> None:
    """``value`` (loader state_dicts under their keys) as DCP folder ``out``."""
    from torch.distributed.checkpoint import FileSystemWriter, save

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        save(value, storage_writer=FileSystemWriter(str(out)), no_dist=True)
