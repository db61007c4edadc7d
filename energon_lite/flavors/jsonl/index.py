"""The line index of a JSONL file (or a ``path label`` meta list): ``<file>.idx``.

Layout (Megatron-Energon's ``.jsonl.idx``, so a file prepared by either library opens in
both): a raw little-endian uint64 array, the byte offset where each sample's line starts,
then one final entry = the file size (``count + 1`` entries). Blank lines are no samples:
their bytes belong to the sample before them, and the first sample starts at byte 0 even
after leading blank lines, exactly as Energon's preparer writes it.

energon_lite also writes ``<file>.idx.json`` (format, count, file size, media root, and a
content digest). It is optional: an index written by Energon has none and is read as JSONL.

The content digest (``sampled_blake2b``) hashes the file's size and up to 64 windows of
4 KiB spread evenly over it (the whole file when it is at most 256 KiB): opening checks it
with a few reads, so a file edited without changing its size is refused instead of served
through stale offsets. Reads check that each line still sits between newlines, which
catches an edit between the windows that moves a line boundary.

Prepare reads every byte anyway, so it also records the file's modification time and a
blake2b of its whole content (``mtime_ns``, ``blake2b``). A local open follows the rule tar
shards follow: the recorded mtime means the file is the one prepared (no read at all); another
mtime (an edit, a copy, a replacement) is checked against the whole-content hash, one read of
the file, so a same-size edit anywhere is refused. Remote files (no mtime) and indexes written
before these fields keep the sampled check. What is left: an edit that keeps both the size and
the mtime (``touch -r``) is served until ``energon-lite lint``, which hashes the whole file.

Algorithm (prepare): the file is read in blocks of a few MiB; line ends, blank lines and
the first/last non-blank byte of each line are found with numpy (no Python object per
line); each block's JSON lines are validated by parsing them as one JSON array with a
single ``json.loads``, and only a block that fails is re-parsed line by line to name the
line number. Offsets stream into the index file, so memory stays flat in the line count.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from tqdm import tqdm

from energon_lite.errors import DatasetFormatError
from energon_lite.flavors.jsonl.layout import INFO_SUFFIX, index_path
from energon_lite.storage import RemotePath, StoragePath

FORMATS = ("jsonl", "text")
_BLOCK = 8 << 20
_SOLID = np.ones(256, dtype=bool)  # byte -> not JSON whitespace
_SOLID[[9, 10, 13, 32]] = False
_WINDOW, _WINDOWS = 4096, 64


def sampled_digest(
    path: str | os.PathLike[str], size: int, pread: Callable[[int, int], bytes] | None = None
) -> str:
    """A blake2b of ``size`` and of up to 64 evenly spread 4 KiB windows of the file
    (read with ``pread(size, offset)`` when given: a remote file)."""
    digest = hashlib.blake2b(str(size).encode(), digest_size=16)
    if pread is not None:
        _sample_windows(digest, size, pread)
        return digest.hexdigest()
    with open(path, "rb") as file:

        def local(length: int, offset: int) -> bytes:
            file.seek(offset)
            return file.read(length)

        _sample_windows(digest, size, local)
    return digest.hexdigest()


def whole_digest(path: str | os.PathLike[str]) -> str:
    """The blake2b of a file's whole content (read in blocks)."""
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as file:
        while block := file.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _sample_windows(digest: Any, size: int, pread: Callable[[int, int], bytes]) -> None:
    if size <= _WINDOW * _WINDOWS:
        digest.update(pread(size, 0))
        return
    step = (size - _WINDOW) / (_WINDOWS - 1)
    for i in range(_WINDOWS):
        digest.update(pread(_WINDOW, round(i * step)))


def info_path(path: str | os.PathLike[str]) -> Path:
    return Path(str(path) + INFO_SUFFIX)


@dataclass
class LineIndexInfo:
    """What ``prepare_lines`` found and wrote."""

    path: Path
    format: str
    count: int
    size: int
    media_root: str | None = None  # relative to the file's folder, or absolute
    digest: str | None = None  # sampled_digest of the file when it was indexed
    mtime_ns: int | None = None  # the file's modification time when it was indexed
    blake2b: str | None = None  # whole_digest of the file when it was indexed


def guess_format(path: str | os.PathLike[str] | RemotePath) -> str:
    return "jsonl" if Path(str(path)).suffix in (".jsonl", ".json", ".ndjson") else "text"


def prepare_lines(
    path: str | os.PathLike[str],
    *,
    fmt: str | None = None,
    media_root: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> LineIndexInfo:
    """Index every non-blank line of ``path``; write ``<path>.idx`` and ``<path>.idx.json``.

    ``fmt``: "jsonl" (each line a JSON object; default for ``.jsonl``) or "text" (``path
    label`` lines). Raises DatasetFormatError naming the line number of the first bad line.
    """
    path = Path(path)
    fmt = fmt or guess_format(path)
    if fmt not in FORMATS:
        raise DatasetFormatError(f"{path}: unknown meta list format {fmt!r}; allowed: {FORMATS}")
    try:
        st = path.stat()
    except FileNotFoundError:
        raise DatasetFormatError(f"{path}: file not found") from None
    size = st.st_size
    whole = hashlib.blake2b(digest_size=16)
    target = index_path(path)
    tmp = target.with_name(target.name + ".tmp")
    count = 0
    try:
        with open(path, "rb") as src, open(tmp, "wb") as out:
            scanner = _Scanner(path, fmt)
            bar = tqdm(
                total=size,
                desc=f"indexing {path.name}",
                unit="B",
                unit_scale=True,
                disable=not progress,
            )
            base, carry = 0, b""
            while True:
                block = src.read(_BLOCK)
                whole.update(block)
                data = carry + block
                if not block:  # last line without a trailing newline
                    if data.strip():
                        starts = scanner.scan(data + b"\n", base, final=True)
                        out.write(starts.tobytes())
                        count += len(starts)
                    break
                cut = data.rfind(b"\n") + 1
                if cut:
                    starts = scanner.scan(data[:cut], base, final=False)
                    out.write(starts.tobytes())
                    count += len(starts)
                base, carry = base + cut, data[cut:]
                bar.update(len(block))
            bar.close()
            if count == 0:
                raise DatasetFormatError(f"{path}: no sample lines (the file is empty or blank)")
            out.write(np.asarray([size], dtype="<u8").tobytes())
        if count:  # the first sample starts at byte 0, as Energon writes it
            with open(tmp, "r+b") as fix:
                fix.write(np.zeros(1, dtype="<u8").tobytes())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    media = None
    if media_root is not None:  # stored relative to the file's folder: the pair can move
        media = os.path.relpath(Path(media_root).resolve(), path.resolve().parent)
    info = LineIndexInfo(
        path,
        fmt,
        count,
        size,
        media,
        sampled_digest(path, size),
        st.st_mtime_ns,
        whole.hexdigest(),
    )
    write_info(info)
    return info


def write_info(info: LineIndexInfo) -> None:
    payload = {
        "version": 1,
        "format": info.format,
        "count": info.count,
        "size": info.size,
        "media_root": info.media_root,
        "sampled_blake2b": info.digest,
        "mtime_ns": info.mtime_ns,
        "blake2b": info.blake2b,
    }
    target = info_path(info.path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, target)


def sidecar(path: StoragePath, suffix: str) -> StoragePath:
    """``path`` with ``suffix`` appended to its name (a local path or a remote URL)."""
    return path.with_name(path.name + suffix)


def read_info(path: StoragePath) -> dict[str, Any]:
    """The ``.idx.json`` of a line file, or the defaults of an Energon-written index."""
    side = sidecar(path, INFO_SUFFIX)
    if not side.is_file():
        return {"format": guess_format(path), "media_root": None}
    try:
        data = json.loads(side.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DatasetFormatError(f"{side}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    if not isinstance(data, dict) or data.get("format") not in FORMATS:
        raise DatasetFormatError(f"{side}: 'format' must be one of {FORMATS}; re-run prepare")
    return data


class _Scanner:
    """Finds sample-line starts in whole-line blocks and validates them."""

    def __init__(self, path: Path, fmt: str) -> None:
        self.path, self.fmt = path, fmt
        self.line_no = 0  # lines (blank ones too) before the current block

    def scan(self, data: bytes, base: int, final: bool) -> np.ndarray:
        buf = np.frombuffer(data, dtype=np.uint8)
        ends = np.flatnonzero(buf == 10)  # each line's newline; data ends with one
        starts = np.concatenate([[0], ends[:-1] + 1])
        solid = _SOLID[buf]
        before = np.concatenate([[0], np.cumsum(solid, dtype=np.int64)])  # solid bytes < i
        nonblank = before[ends] > before[starts]
        if self.fmt == "jsonl" and nonblank.any():
            positions = np.arange(len(buf), dtype=np.int64)
            last_solid = np.maximum.accumulate(np.where(solid, positions, -1))
            first_solid = np.minimum.accumulate(np.where(solid, positions, len(buf))[::-1])[::-1]
            first = buf[first_solid[starts[nonblank]]]
            last = buf[last_solid[ends[nonblank]]]
            bad = np.flatnonzero((first != ord("{")) | (last != ord("}")))
            lines = np.flatnonzero(nonblank)
            if len(bad):
                line = int(lines[bad[0]])
                text = data[int(starts[line]) : int(ends[line])]
                self._fail(line, "not a JSON object {...}", text)
            self._validate(data, starts[lines], ends[lines], lines)
        self.line_no += len(starts)
        return (starts[nonblank] + base).astype("<u8")

    def _validate(
        self, data: bytes, starts: np.ndarray, ends: np.ndarray, lines: np.ndarray
    ) -> None:
        # one json.loads per block: lines joined into an array (newlines become commas)
        joined = np.frombuffer(data, dtype=np.uint8).copy()
        joined[ends[:-1]] = 44  # ","
        joined[ends[-1]] = 32
        try:
            parsed = json.loads(b"[" + joined[int(starts[0]) :].tobytes() + b"]")
            if len(parsed) == len(lines):
                return
        except (ValueError, RecursionError):  # JSONDecodeError, bad UTF-8, a 5000-digit int
            pass
        for line, start, end in zip(lines.tolist(), starts.tolist(), ends.tolist()):
            try:
                value = json.loads(data[start:end])
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                self._fail(line, f"malformed JSON ({exc})", data[start:end])
            except ValueError as exc:  # valid JSON Python refuses: an int of 4300+ digits
                self._fail(line, f"unreadable JSON value ({exc})", data[start:end])
            except RecursionError:
                self._fail(line, "JSON nested too deeply", data[start:end])
            if not isinstance(value, dict):
                self._fail(line, "not a JSON object", data[start:end])

    def _fail(self, line: int, problem: str, text: bytes) -> NoReturn:
        number = self.line_no + line + 1
        shown = text[:80].decode("utf-8", "replace")
        raise DatasetFormatError(f"{self.path}:{number}: line {number}: {problem}: {shown!r}")
