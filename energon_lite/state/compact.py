"""A compact form of a loader state that holds many similar pipeline states (version 3).

A rank of a canonical layout saves one state per logical pipeline it runs (up to K x Q =
1024 on one rank); those states have the same structure and differ in a few numbers (reader
positions, counters, buffered sample keys). Version 3 keeps the rest of the state as it is
and replaces each such list of pipeline states (the ``sources`` of a level whose type the
caller names) by its length; the pipelines travel together under ``pipelines``:

* each pipeline's state is split into a *template* (its structure, with every value that is
  not an integer kept as it is) and its integers in order;
* the distinct templates are stored once; a pipeline names its template by number;
* the integers of the pipelines of one template form a table (a row per pipeline); each
  column is stored as the differences from the row above, zigzag-coded, in the smallest
  unsigned integer type that holds them, column after column;
* a pipeline that has not started (``None``) is a zero bit of a bitmap;
* the lot is msgpack, compressed (raw LZMA2), as base85 text (a state stays JSON-able).

Reading it back (:func:`unpacked`) gives the version 2 state, digest and all, that the rest
of the library reads; a state of version 2 passes unchanged. The version 3 state carries its
own digest, checked before anything is read.
"""

from __future__ import annotations

import base64
import lzma
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
import numpy as np

from energon_lite.errors import StateError, short_repr
from energon_lite.state.codec import STATE_VERSION, state_digest

PACKED_VERSION = 3
_CODEC = 1
_SLOT = 0  # a template's integer slot; any other node is a tagged list
_INT_LIMIT = 1 << 61  # integers beyond stay in the template (differences fit int64)
_LZMA = [{"id": lzma.FILTER_LZMA2, "preset": 6}]
_DTYPES = (np.uint8, np.uint16, np.uint32, np.uint64)
_TOPS = (0xFF, 0xFFFF, 0xFFFF_FFFF, 0xFFFF_FFFF_FFFF_FFFF)


def packed(state: dict[str, Any], is_many: Callable[[Any], bool]) -> dict[str, Any]:
    """``state`` (a version 2 loader state) in version 3 form when a worker level holds a
    level for which ``is_many(level)`` is true (its ``sources`` get packed); else ``state``."""
    records: list[Any] = []
    workers = [_emptied(level, is_many, records) for level in state["workers"]]
    if not any(_counts(level) for level in workers):
        return state
    out = {key: value for key, value in state.items() if key != "digest"}
    out.update(version=PACKED_VERSION, workers=workers, pipelines=pack_records(records))
    out["digest"] = state_digest(out)
    return out


def unpacked(state: Any) -> Any:
    """The version 2 form of a version 3 state; anything else unchanged."""
    if not isinstance(state, dict) or state.get("version") != PACKED_VERSION:
        return state
    if state.get("digest") != state_digest(state):
        raise StateError(
            "loader state does not match its digest: it was edited or corrupted after "
            "save_state_rank(); refusing it rather than changing the data stream"
        )
    records = iter(unpack_records(state.get("pipelines")))
    workers = state.get("workers")
    if not isinstance(workers, list):
        raise StateError(f"loader state workers={short_repr(workers)} is corrupt")
    out = {key: value for key, value in state.items() if key not in ("digest", "pipelines")}
    out["workers"] = [_filled(level, records) for level in workers]
    if next(records, _END) is not _END:
        raise StateError("loader state holds more pipeline states than its workers run; corrupt")
    out["version"] = STATE_VERSION
    out["digest"] = state_digest(out)
    return out


_END = object()


def _emptied(level: Any, is_many: Callable[[Any], bool], records: list[Any]) -> Any:
    """``level`` with the pipelines of its many-sources levels moved to ``records``."""
    if not isinstance(level, dict):
        return level
    if is_many(level) and isinstance(level.get("sources"), list):
        records.extend(level["sources"])
        return {**level, "sources": len(level["sources"])}
    if "source" in level:
        return {**level, "source": _emptied(level["source"], is_many, records)}
    return level


def _counts(level: Any) -> bool:
    while isinstance(level, dict):
        if isinstance(level.get("sources"), int):
            return True
        level = level.get("source")
    return False


def _filled(level: Any, records: Iterator[Any]) -> Any:
    if not isinstance(level, dict):
        return level
    count = level.get("sources")
    if isinstance(count, int) and not isinstance(count, bool):
        sources = [next(records, _END) for _ in range(count)]
        if any(source is _END for source in sources):
            raise StateError("loader state holds fewer pipeline states than its workers run")
        return {**level, "sources": sources}
    if "source" in level:
        return {**level, "source": _filled(level["source"], records)}
    return level


# records -------------------------------------------------------------------------------


def pack_records(records: list[Any]) -> dict[str, Any]:
    """Plain-data states (``None``: not started) as one compact, JSON-able value."""
    started = [record is not None for record in records]
    templates: list[Any] = []
    numbers: dict[bytes, int] = {}
    rows: list[list[list[int]]] = []
    which: list[int] = []
    for record in records:
        if record is None:
            continue
        values: list[int] = []
        template = _template(record, values)
        key = msgpack.packb(template, use_bin_type=True)
        number = numbers.setdefault(key, len(templates))
        if number == len(templates):
            templates.append(template)
            rows.append([])
        which.append(number)
        rows[number].append(values)
    tables = [_table(group) for group in rows]
    body = [
        _CODEC,
        len(records),
        np.packbits(np.array(started, dtype=bool)).tobytes(),
        templates,
        which,
        tables,
    ]
    data = lzma.compress(msgpack.packb(body, use_bin_type=True), lzma.FORMAT_RAW, filters=_LZMA)
    return {"codec": _CODEC, "data": base64.b85encode(data).decode("ascii")}


def unpack_records(pipelines: Any) -> list[Any]:
    """The states :func:`pack_records` packed, in order."""
    try:
        if not isinstance(pipelines, dict) or pipelines.get("codec") != _CODEC:
            raise ValueError(f"unknown pipelines codec {short_repr(pipelines)}")
        raw = lzma.decompress(base64.b85decode(pipelines["data"]), lzma.FORMAT_RAW, filters=_LZMA)
        _, count, bitmap, templates, which, tables = msgpack.unpackb(
            raw, raw=False, strict_map_key=False
        )
        started = np.unpackbits(np.frombuffer(bitmap, np.uint8), count=count).astype(bool)
        columns = [_untable(table) for table in tables]
        next_row = [0] * len(templates)
        out: list[Any] = []
        numbers = iter(which)
        for is_started in started.tolist():
            if not is_started:
                out.append(None)
                continue
            number = next(numbers)
            row = columns[number][next_row[number]]
            next_row[number] += 1
            values = iter(row)
            out.append(_built(templates[number], values))
            if next(values, _END) is not _END:
                raise ValueError("a pipeline has more numbers than its template")
        return out
    except (ValueError, TypeError, KeyError, IndexError, StopIteration, lzma.LZMAError) as exc:
        raise StateError(f"loader state: its pipelines are corrupt ({exc})") from None
    except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise StateError(f"loader state: its pipelines are corrupt ({exc})") from None


def _template(value: Any, values: list[int]) -> Any:
    kind = type(value)
    if kind is int and -_INT_LIMIT < value < _INT_LIMIT:
        values.append(value)
        return _SLOT
    if kind is dict:
        return ["d", list(value), [_template(v, values) for v in value.values()]]
    if kind is list or kind is tuple:
        return ["l", [_template(v, values) for v in value]]
    return ["c", value]  # a string, float, bool, None, bytes or a huge integer


def _built(template: Any, values: Iterator[int]) -> Any:
    if type(template) is int:
        return next(values)
    tag = template[0]
    if tag == "d":
        return {key: _built(child, values) for key, child in zip(template[1], template[2])}
    if tag == "l":
        return [_built(child, values) for child in template[1]]
    if tag == "c":
        return template[1]
    raise ValueError(f"unknown template node {short_repr(template)}")


def _table(group: list[list[int]]) -> list[Any]:
    """[rows, columns, dtype number, bytes]: the rows' integers, column by column, as
    zigzag differences from the row above."""
    table = np.array(group, dtype=np.int64).reshape(len(group), -1)
    deltas = np.diff(table, axis=0, prepend=np.zeros((1, table.shape[1]), np.int64))
    zigzag = ((deltas << 1) ^ (deltas >> 63)).astype(np.uint64).T.ravel()
    top = int(zigzag.max()) if zigzag.size else 0
    kind = next(i for i, most in enumerate(_TOPS) if top <= most)
    return [table.shape[0], table.shape[1], kind, zigzag.astype(_DTYPES[kind]).tobytes()]


def _untable(table: list[Any]) -> list[list[int]]:
    rows, cols, kind, data = table
    zigzag = np.frombuffer(data, dtype=_DTYPES[kind]).astype(np.uint64)
    if zigzag.size != rows * cols:
        raise ValueError(f"a table of {rows} x {cols} holds {zigzag.size} numbers")
    deltas = ((zigzag >> np.uint64(1)).astype(np.int64)) ^ -(
        (zigzag & np.uint64(1)).astype(np.int64)
    )
    result: list[list[int]] = np.cumsum(deltas.reshape(cols, rows).T, axis=0).tolist()
    return result
