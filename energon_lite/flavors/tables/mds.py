"""MosaicML Streaming's MDS folders (``index.json`` + ``shard.00000.mds[.zstd]``), read in place.

``index.json`` lists the shards: each with its ``samples`` count, ``column_names``,
``column_encodings``, ``column_sizes`` (the byte size of a fixed-size column, else null),
``compression`` and its file (``raw_data``, or ``zip_data`` when compressed). A shard is an
offset table (``binary.py``) followed by the samples; a sample is a ``uint32`` size for each
column without a fixed size, then the columns' bytes. A folder with its own ``index.json``
is one split, read under any split name; else ``<folder>/<split>/index.json``.

Encodings and what a column holds here: ``jpeg``/``png`` the image file's bytes (decoded by
the TaskEncoder's decoder like a tar ``.jpg``), ``pil`` a ``PIL.Image`` (raw pixels, as
Streaming returns it), ``str`` text, ``int`` / ``float16..64`` / ``int8..uint64`` numbers,
``str_int`` / ``str_float`` / ``str_decimal``, ``ndarray`` a numpy array, ``bytes`` bytes
(decoded by content), ``json`` decoded by the decoder, ``list[jpeg]`` / ``list[png]`` /
``jpeg_array`` lists of image bytes, ``pkl`` refused unless pickles are allowed.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import numpy as np
from PIL import Image

from energon_lite.errors import DatasetFormatError
from energon_lite.flavors.tables.binary import read_index, sample_bytes, split_sizes
from energon_lite.flavors.tables.format import TableFormat
from energon_lite.storage import StoragePath, ops

_SCALARS = {
    f"{kind}{bits}": np.dtype(f"{kind}{bits}")
    for kind, all_bits in (
        ("int", (8, 16, 32, 64)),
        ("uint", (8, 16, 32, 64)),
        ("float", (16, 32, 64)),
    )
    for bits in all_bits
}
_NDARRAY_DTYPES = {
    8: "uint8", 9: "int8", 16: "uint16", 17: "int16", 18: "float16", 32: "uint32",
    33: "int32", 34: "float32", 64: "uint64", 65: "int64", 66: "float64",
}  # fmt: skip
# encoding -> the decoder's type of the column's value ("" = decoded here)
_TYPES = {"jpeg": "jpg", "png": "png", "bytes": "auto", "json": "json", "pkl": "pickle"}


def _ndarray(encoding: str, data: bytes) -> np.ndarray:
    """Streaming's ``ndarray[:dtype[:shape]]``: the dtype and shape the header does not fix
    precede the values (a dtype byte; ``ndim << 2 | shape dtype`` then the shape)."""
    args = encoding.split(":")[1:]
    index = 0
    if args and args[0]:
        dtype = args[0]
    else:
        dtype, index = _NDARRAY_DTYPES[data[0]], 1
    if len(args) > 1:
        shape: tuple[int, ...] = tuple(int(d) for d in args[1].split(","))
    else:
        ndim, width = data[index] >> 2, 1 << (data[index] & 3)
        index += 1
        shape = tuple(np.frombuffer(data[index : index + ndim * width], f"<u{width}").tolist())
        index += ndim * width
    return np.frombuffer(data[index:], dtype).reshape(shape).copy()


def _pil(data: bytes) -> Image.Image:
    width, height, size = np.frombuffer(data[:12], "<u4").tolist()
    return Image.frombytes(data[12 : 12 + size].decode("utf-8"), (width, height), data[12 + size :])


def _image_list(data: bytes, header: int) -> list[bytes]:
    """``list[jpeg]``/``list[png]`` (a 4-byte placeholder first) and ``jpeg_array``."""
    count = int(np.frombuffer(data[header : header + 4], "<u4")[0])
    sizes = np.frombuffer(data[header + 4 : header + 4 + 4 * count], "<u4").tolist()
    position, out = header + 4 + 4 * count, []
    for size in sizes:
        out.append(data[position : position + size])
        position += size
    return out


def decode_column(encoding: str, data: bytes) -> Any:
    """One column's bytes as this reader hands them out (see the module text)."""
    base = encoding.split(":", 1)[0]
    if base in _TYPES:
        return data
    if base == "str":
        return data.decode("utf-8")
    if base == "int":
        return int(np.frombuffer(data, "<i8")[0])
    if base in _SCALARS:
        return np.frombuffer(data, _SCALARS[base])[0].item()
    if base == "str_int":
        return int(data.decode("utf-8"))
    if base == "str_float":
        return float(data.decode("utf-8"))
    if base == "str_decimal":
        return Decimal(data.decode("utf-8"))
    if base == "ndarray":
        return _ndarray(encoding, data)
    if base == "pil":
        return _pil(data)
    if base in ("list[jpeg]", "list[png]"):
        return _image_list(data, 4)
    if base in ("jpeg_array", "jpegarray"):
        return _image_list(data, 0)
    if base == "list[pil]":
        return [_pil(item) for item in _image_list(data, 4)]
    raise DatasetFormatError(f"MDS encoding {encoding!r} is not read")


class MdsFormat(TableFormat):
    """The shards of one MDS split, from its ``index.json``."""

    name = "mds"

    def __init__(self, root: StoragePath, split_part: str) -> None:
        super().__init__(root, split_part)
        index_file, prefix, shards = read_index(root, split_part, "MDS", lambda i: i["shards"])
        folder = index_file.parent
        self.columns: list[str] = []
        self.encodings: list[str] = []
        self.fixed: list[int | None] = []
        self.compression: list[str | None] = []
        for number, shard in enumerate(shards):
            where = f"{index_file} shard {number}"
            if shard.get("format") != "mds":
                raise DatasetFormatError(f"{where}: format {shard.get('format')!r} is not mds")
            if number == 0:
                self.columns = list(shard["column_names"])
                self.encodings = list(shard["column_encodings"])
                self.fixed = list(shard["column_sizes"])
            elif (
                list(shard["column_names"]) != self.columns
                or list(shard["column_encodings"]) != self.encodings
            ):
                raise DatasetFormatError(f"{where}: its columns differ from shard 0's")
            name, compression = _shard_file(folder, shard)
            self.shard_names.append(prefix + name)
            self.compression.append(compression)
            self.counts.append(int(shard["samples"]))
            zipped = shard.get("zip_data") if compression else None
            self.sizes.append(int((zipped or shard["raw_data"])["bytes"]))
        for column, encoding in zip(self.columns, self.encodings):
            base = encoding.split(":", 1)[0]
            if base not in _TYPES and base not in _KNOWN:
                raise DatasetFormatError(
                    f"{index_file}: column {column!r} has encoding {encoding!r}, which is not read"
                )
            self.types[column] = _TYPES.get(base, "")

    def read_rows(self, shard_id: int, start: int, end: int) -> list[dict[str, Any]]:
        path = self.shard_path(shard_id)
        rows = []
        for row, data in enumerate(
            sample_bytes(self, shard_id, start, end, self.compression[shard_id]), start
        ):
            fields = split_sizes(path, row, data, self.fixed)
            try:
                rows.append(
                    {
                        column: decode_column(encoding, field)
                        for column, encoding, field in zip(self.columns, self.encodings, fields)
                    }
                )
            except (ValueError, IndexError, UnicodeDecodeError) as exc:
                raise DatasetFormatError(f"{path}: sample {row}: {exc}") from None
        return rows


_KNOWN = frozenset(
    {"str", "int", "str_int", "str_float", "str_decimal", "ndarray", "pil", "list[jpeg]",
     "list[png]", "list[pil]", "jpeg_array", "jpegarray", *_SCALARS}
)  # fmt: skip


def _shard_file(folder: StoragePath, shard: dict[str, Any]) -> tuple[str, str | None]:
    """The file to read and its compression: the raw file when it is there (Streaming
    leaves it next to the compressed one once it decompressed it), else the compressed one."""
    compression = shard.get("compression")
    raw = shard["raw_data"]["basename"]
    if not compression or not shard.get("zip_data"):
        return raw, None
    if ops.exists(folder / raw):
        return raw, None
    return shard["zip_data"]["basename"], compression


FORMAT = MdsFormat
