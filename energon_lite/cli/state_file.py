"""Read a saved loader state file as plain data: msgpack, JSON or ``torch.save`` zips.

A loader state is plain data by design (dicts, lists, numbers, strings), so nothing here
unpickles arbitrary objects: ``torch.save`` files are read with ``weights_only=True`` (torch's
restricted unpickler, which builds only tensors and containers) and bare pickle files are
refused. A crafted file therefore cannot run code in ``energon-lite checkpoint info``.

Reads are bounded too: only regular files are opened for reading (a FIFO would block, a
symlink to ``/dev/zero`` never ends), and a file larger than ``MAX_STATE_FILE_BYTES`` is
refused from its size, before any of it is read.
"""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path
from typing import Any

from energon_lite.errors import StateError
from energon_lite.state.codec import decode_state

_PICKLE_PROTOCOLS = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")
_FORMATS = "msgpack (energon_lite.state.codec.encode_state), JSON or torch.save"

# A loader state is a few KB; a trainer checkpoint holding one may be larger, but not this.
MAX_STATE_FILE_BYTES = 1 << 30

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def read_bounded(path: str | Path, limit: int = MAX_STATE_FILE_BYTES) -> bytes:
    """The bytes of regular file ``path``, at most ``limit`` of them; StateError naming the
    file for anything else (missing, not a regular file, larger than ``limit``)."""
    path = Path(path)
    try:  # O_NONBLOCK: opening a FIFO must not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise StateError(f"{path}: no such file") from None
    except OSError as exc:
        raise StateError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a file")
            link = f" (a link to {os.path.realpath(path)})" if path.is_symlink() else ""
            raise StateError(f"{path}: is {kind}{link}, not a state file; give a regular file")
        if info.st_size > limit:
            raise StateError(
                f"{path}: {info.st_size:,} bytes, more than the {limit:,} a state file may have "
                "(loader states are kilobytes); give the state file itself, not a whole "
                "trainer checkpoint"
            )
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:  # it grew while being read
            raise StateError(f"{path}: grew past {limit:,} bytes while being read")
        return b"".join(chunks)
    except OSError as exc:
        raise StateError(f"{path}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_state_file(path: str | Path) -> Any:
    """The state stored in ``path``; StateError naming the file for anything else."""
    path = Path(path)
    data = read_bounded(path)
    if data[:2] == b"PK":  # torch.save's zip format
        return _torch_load(path, data)
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


def _torch_load(path: Path, data: bytes) -> Any:
    import torch

    try:
        return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
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
