"""Read a saved loader state file as plain data: msgpack, JSON or ``torch.save`` zips.

A loader state is plain data by design (dicts, lists, numbers, strings), so nothing here
unpickles arbitrary objects: ``torch.save`` files are read with ``weights_only=True`` (torch's
restricted unpickler, which builds only tensors and containers) and bare pickle files are
refused. A crafted file therefore cannot run code in ``energon-lite checkpoint info``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from energon_lite.errors import StateError
from energon_lite.state.codec import decode_state

_PICKLE_PROTOCOLS = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")
_FORMATS = "msgpack (energon_lite.state.codec.encode_state), JSON or torch.save"


def read_state_file(path: str | Path) -> Any:
    """The state stored in ``path``; StateError naming the file for anything else."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise StateError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise StateError(f"{path}: is a directory, not a state file") from None
    except OSError as exc:
        raise StateError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if data[:2] == b"PK":  # torch.save's zip format
        return _torch_load(path)
    if data.lstrip()[:1] in (b"{", b"["):
        try:
            return json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise StateError(f"{path}: not valid JSON: {_first_line(exc)}") from None
    try:
        return decode_state(data)
    except StateError:
        if data[:2] in _PICKLE_PROTOCOLS or data[:1] == b"(":
            raise StateError(
                f"{path}: is a pickle file; energon-lite never unpickles files (a pickle can run "
                f"code). Save the state as {_FORMATS}: it is plain data"
            ) from None
        raise StateError(f"{path}: not a loader state file; expected {_FORMATS}") from None


def _torch_load(path: Path) -> Any:
    import torch

    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, ... for foreign files
        raise StateError(
            f"{path}: refused: torch.load(weights_only=True) cannot read it "
            f"({type(exc).__name__}: {_first_line(exc)}); a loader state is plain data, "
            f"save it with torch.save(state, path), encode_state or JSON"
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else ""
    return line if len(line) <= 200 else line[:197] + "..."
