"""``prepare_video_text``: an Open-Sora CSV -> a memory-mapped index, in one pass.

The CSV has the columns ``path,text,num_frames,height,width``, optionally ``fps``, and any
extra columns (kept as JSON per row). The index is a folder (default ``<csv stem>.energon``
next to the CSV) whose ``.nv-meta`` holds:

* ``num_frames.npy``, ``height.npy``, ``width.npy`` (int32), ``fps.npy`` (float32, NaN when
  absent); ``offsets.npy`` (int64, ``3 * rows + 1``) into ``strings.bin``, where row ``i``'s
  path, text and extra-columns JSON follow each other;
* ``rows_<split>.npy`` (the rows of a split, only with a split ratio);
* ``video_text.json`` (columns, where media paths are relative to, the CSV's fingerprint)
  and, so that metadatasets and ``energon-lite info`` see an ordinary prepared dataset, an
  ``.info.json``/``split.yaml`` with one pseudo-shard per split and a ``dataset.yaml``.

Nothing per row is kept in Python objects while reading: strings go straight to the blob
file and numbers into ``array`` buffers, so a 10M-row table prepares in constant Python
memory apart from the numeric arrays themselves.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import shutil
import sys
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import yaml
from tqdm import tqdm

from energon_lite.errors import ConfigError, DatasetFormatError, logger
from energon_lite.flavors.video_text.layout import (
    MARKER,
    REQUIRED,
    VERSION,
    default_output,
    quick_fingerprint,
    shard_name,
)
from energon_lite.shards.meta import META_DIR

MISSING_MEDIA = ("warn", "error", "ignore")


@dataclass
class VideoTextReport:
    """What ``prepare_video_text`` wrote."""

    output: Path
    num_rows: int
    splits: dict[str, int]
    extra_columns: list[str]
    missing_media: list[tuple[int, str]] = field(default_factory=list)  # (row, path), first 20
    num_missing_media: int = 0


class _HashingReader(io.RawIOBase):
    """Hashes the bytes as the CSV parser reads them, so the fingerprint costs no 2nd pass."""

    def __init__(self, file: BinaryIO) -> None:
        self.file, self.digest, self.done = file, hashlib.blake2b(digest_size=16), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self.file.readinto(buffer)  # type: ignore[attr-defined]  # a real file object
        self.digest.update(memoryview(buffer)[:n])
        self.done += n
        return n


def _number(text: str, kind: type, where: str, column: str, csv_path: Path) -> Any:
    try:
        value = kind(text)
    except ValueError:
        value = None
    if kind is int and value is not None and value < 1:
        value = None
    if value is None:
        need = "an integer >= 1" if kind is int else "a number"
        raise DatasetFormatError(f"{csv_path}: {where}, column {column!r}: {text!r} is not {need}")
    return value


def prepare_video_text(
    csv_path: str | os.PathLike[str],
    output: str | os.PathLike[str] | None = None,
    *,
    split_ratio: list[tuple[str, float]] | None = None,
    missing_media: str = "warn",
    seed: int = 0,
    progress: bool = True,
    default_num_frames: int | None = None,
) -> VideoTextReport:
    """Index ``csv_path``; the whole table is split ``train`` unless ``split_ratio`` is given.

    ``split_ratio=[("train", 8), ("val", 1)]`` deals the rows at random (``seed``) into
    splits of those proportions; ``[("val", 1)]`` makes the whole table the val split.
    ``missing_media``: a media file that does not exist is counted and logged (``"warn"``),
    raises (``"error"``), or is not looked for (``"ignore"``: no ``stat`` per row).
    ``default_num_frames`` makes the ``num_frames`` column optional (e.g. 1 for an image
    table with ``path,text,height,width``): a table without it gets this value per row.
    """
    csv_path = Path(csv_path).resolve()
    if missing_media not in MISSING_MEDIA:
        raise ConfigError(f"{missing_media=} must be one of {MISSING_MEDIA}")
    if not csv_path.is_file():
        raise DatasetFormatError(f"{csv_path}: CSV file not found")
    out = Path(output).resolve() if output is not None else default_output(csv_path)
    meta = out / META_DIR
    tmp = out / (META_DIR + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    media_base = Path(os.path.relpath(csv_path.parent, out))
    base = csv_path.parent
    nums = {name: array("i") for name in ("num_frames", "height", "width")}
    fps, offsets = array("f"), array("q", [0])
    missing: list[tuple[int, str]] = []
    num_missing = 0
    checked: dict[str, bool] = {}
    size = csv_path.stat().st_size
    with open(csv_path, "rb") as raw, open(tmp / "strings.bin", "wb") as blob:
        hashing = _HashingReader(raw)
        text = io.TextIOWrapper(io.BufferedReader(hashing), encoding="utf-8", newline="")
        reader = csv.reader(text)
        header = next(reader, None)
        if header is None:
            raise DatasetFormatError(f"{csv_path}: empty CSV; need a header {','.join(REQUIRED)}")
        header = [h.strip() for h in header]
        optional = {"num_frames"} if default_num_frames is not None else set()
        absent = [c for c in REQUIRED if c not in header and c not in optional]
        if absent:
            raise DatasetFormatError(
                f"{csv_path}: missing column(s) {absent}; the header has {header}, "
                f"need {list(REQUIRED)} (+ optional fps and extra columns)"
            )
        dupes = sorted({h for h in header if header.count(h) > 1})
        if dupes:
            raise DatasetFormatError(f"{csv_path}: column(s) {dupes} appear twice in the header")
        col = {name: i for i, name in enumerate(header)}
        extra = [h for h in header if h not in (*REQUIRED, "fps")]
        bar = tqdm(total=size, desc=f"indexing {csv_path.name}", unit="B", unit_scale=True,
                   disable=not progress, file=sys.stderr)  # fmt: skip
        position, written = 0, 0
        for row_index, row in enumerate(reader):
            where = f"line {reader.line_num} (row {row_index})"
            if len(row) != len(header):
                raise DatasetFormatError(
                    f"{csv_path}: {where} has {len(row)} fields, the header {len(header)}"
                )
            path = row[col["path"]]
            if not path:
                raise DatasetFormatError(f"{csv_path}: {where}, column 'path' is empty")
            for name, values in nums.items():
                if name not in col:  # num_frames, absent with default_num_frames
                    values.append(int(default_num_frames or 1))
                    continue
                values.append(_number(row[col[name]].strip(), int, where, name, csv_path))
            raw_fps = row[col["fps"]].strip() if "fps" in col else ""
            value = _number(raw_fps, float, where, "fps", csv_path) if raw_fps else math.nan
            fps.append(value)
            if missing_media != "ignore" and not _exists(base, path, checked):
                if missing_media == "error":
                    raise DatasetFormatError(
                        f"{csv_path}: {where}, column 'path': media file {path!r} not found "
                        f"(relative paths are relative to {base})"
                    )
                num_missing += 1
                if len(missing) < 20:
                    missing.append((row_index, path))
            extras = json.dumps({c: row[col[c]] for c in extra}, ensure_ascii=False)
            for piece in (path, row[col["text"]], extras if extra else ""):
                data = piece.encode("utf-8")
                blob.write(data)
                written += len(data)
                offsets.append(written)
            if row_index % 4096 == 0:
                bar.update(hashing.done - position)
                position = hashing.done
        bar.update(hashing.done - position)
        bar.close()
        digest = hashing.digest.hexdigest()
    num_rows = len(fps)
    for name, values in nums.items():
        np.save(tmp / f"{name}.npy", np.frombuffer(values, dtype=np.int32))
    np.save(tmp / "fps.npy", np.frombuffer(fps, dtype=np.float32))
    np.save(tmp / "offsets.npy", np.frombuffer(offsets, dtype=np.int64))
    splits = _write_splits(tmp, csv_path.name, num_rows, split_ratio, seed)
    info = {
        "version": VERSION,
        "csv": os.path.relpath(csv_path, out),
        "media_base": str(media_base),
        "columns": header,
        "extra_columns": extra,
        "num_rows": num_rows,
        "splits": splits,
        "csv_fingerprint": {"blake2b": digest, **quick_fingerprint(csv_path)},
    }
    (tmp / MARKER).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(meta, ignore_errors=True)
    tmp.rename(meta)
    if num_missing:
        logger.warning(
            "%s: %d row(s) name a media file that does not exist, e.g. %s; they will be "
            "skipped (and logged) when loaded",
            csv_path, num_missing, ", ".join(f"row {r}: {p!r}" for r, p in missing[:3]),
        )  # fmt: skip
    return VideoTextReport(
        out, num_rows, {k: v["count"] for k, v in splits.items()}, extra, missing, num_missing
    )


def _exists(base: Path, path: str, checked: dict[str, bool]) -> bool:
    # Open-Sora tables repeat clips of one file; stat each distinct path once.
    found = checked.get(path)
    if found is None:
        found = os.path.exists(base / path)
        if len(checked) < 1_000_000:
            checked[path] = found
    return found


def _write_splits(
    meta: Path, csv_name: str, num_rows: int, ratio: list[tuple[str, float]] | None, seed: int
) -> dict[str, dict[str, Any]]:
    """Write the split files; return ``{split: {"shard", "rows", "count"}}``."""
    if not ratio:
        splits = {
            "train": {"shard": shard_name(csv_name, "train"), "rows": None, "count": num_rows}
        }
    else:
        weights = np.asarray([w for _, w in ratio], dtype=np.float64)
        if (weights < 0).any() or weights.sum() <= 0 or len({n for n, _ in ratio}) != len(ratio):
            raise ConfigError(
                f"split_ratio={ratio!r}: need distinct names and weights >= 0, sum > 0"
            )
        cuts = np.round(np.cumsum(weights) / weights.sum() * num_rows).astype(np.int64)
        order = np.random.default_rng(seed).permutation(num_rows)
        splits, start = {}, 0
        for (name, _), end in zip(ratio, cuts):
            # Sorted rows: a split reads the CSV's order; the loader shuffles anyway.
            rows = np.sort(order[start:end]).astype(np.int64)
            np.save(meta / f"rows_{name}.npy", rows)
            splits[name] = {"shard": shard_name(csv_name, name), "rows": f"rows_{name}.npy",
                            "count": int(end - start)}  # fmt: skip
            start = int(end)
    counts = {s["shard"]: s["count"] for s in splits.values()}
    (meta / ".info.json").write_text(json.dumps({"shard_counts": counts}, indent=2) + "\n")
    split_parts = {name: [s["shard"]] for name, s in splits.items()}
    with open(meta / "split.yaml", "w", encoding="utf-8") as file:
        yaml.safe_dump({"split_parts": split_parts, "exclude": []}, file, sort_keys=False)
    fields = ("path", "text", "num_frames", "height", "width", "fps", "extra")
    config = {
        "sample_type": {"__module__": "energon_lite.flavors.video_text", "__class__": "VideoTextSample"},
        "field_map": {name: f"row[{name}]" for name in fields},
    }  # fmt: skip
    with open(meta / "dataset.yaml", "w", encoding="utf-8") as file:
        yaml.safe_dump(config, file, sort_keys=False)
    return splits
