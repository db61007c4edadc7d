"""LitData ``optimize`` folders (``index.json`` + ``chunk-*.bin``), read in place.

``index.json`` holds ``chunks`` (each ``filename`` and ``chunk_size``: its item count) and a
``config``: the ``data_format`` (one serializer name per leaf of an item), the ``data_spec``
(the item's tree: a JSON treespec, ``[protocol, {type, context, children_spec}]``) and the
``compression``. A chunk is an offset table (``binary.py``); an item is a ``uint32`` size
for every leaf, then the leaves' bytes. An item that is a dict gives one column per key;
any other item is the column ``item``. A folder with its own ``index.json`` is one split,
read under any split name; else ``<folder>/<split>/index.json``.

Serializers and what a leaf holds here: ``jpeg`` and ``image:<ext>`` the image file's bytes
(decoded by the TaskEncoder's decoder), ``pil`` a ``PIL.Image``, ``tensor`` /
``no_header_tensor`` a torch tensor, ``numpy`` / ``no_header_numpy`` a numpy array,
``int`` / ``float`` / ``bool`` / ``str`` / ``text`` Python values, ``bytes`` (and ``audio``,
``video``, ``file``) bytes decoded by content, ``jpeg_array`` a list of image bytes,
``pickle`` refused unless pickles are allowed. Compression: zstd per chunk (``.zstd.bin``, inflated
whole), per batch of items (framed chunks: only the frames holding the rows are inflated)
or per item. Encrypted chunks and Arrow-row chunks are refused, naming the file.
"""

from __future__ import annotations

import functools
import json
import struct
from typing import Any

import numpy as np
import torch

from energon_lite.errors import DatasetFormatError
from energon_lite.flavors.tables.binary import decompress, read_index, sample_bytes, split_sizes
from energon_lite.flavors.tables.format import TableFormat
from energon_lite.flavors.tables.mds import _image_list, _pil
from energon_lite.storage import ShardFile, StoragePath

_TORCH_DTYPES = [
    torch.float32, torch.float32, torch.float64, torch.float64, torch.complex64,
    torch.complex64, torch.complex128, torch.complex128, torch.float16, torch.float16,
    torch.bfloat16, torch.uint8, torch.int8, torch.int16, torch.int16, torch.int32,
    torch.int32, torch.int64, torch.int64, torch.bool, torch.uint16,
]  # fmt: skip
_NUMPY_DTYPES = [
    np.dtype(t)
    for t in (
        np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
        np.float16, np.float32, np.float64, np.complex64, np.complex128, bool,
    )
]  # fmt: skip
# serializer -> the decoder's type of the leaf ("" = decoded here)
_TYPES = {"jpeg": "jpg", "bytes": "auto", "audio": "auto", "video": "auto", "file": "auto",
          "pickle": "pickle"}  # fmt: skip
_DECODED = frozenset(
    {"str", "text", "int", "float", "bool", "pil", "tensor", "no_header_tensor", "numpy",
     "no_header_numpy", "jpeg_array"}
)  # fmt: skip


def _tensor(data: bytes) -> torch.Tensor:
    """A dtype index, the rank and the shape as ``uint32``, then the values: big-endian since
    LitData 0.2.5x, little-endian before (the big-endian reading of an older header gives a
    rank past any tensor's, so the two are told apart)."""
    dtype, rank = struct.unpack_from(">II", data, 0)
    order = ">"
    if rank > 64 or 8 + 4 * rank > len(data):
        dtype, rank = struct.unpack_from("<II", data, 0)
        order = "<"
    shape = struct.unpack_from(f"{order}{rank}I", data, 8)
    values = np.frombuffer(data[8 + 4 * rank :], dtype=np.uint8).copy()
    return torch.from_numpy(values).view(_TORCH_DTYPES[dtype]).reshape(shape)


def _numpy(data: bytes) -> np.ndarray:
    dtype, rank = np.frombuffer(data[:8], "<u4").tolist()
    shape = np.frombuffer(data[8 : 8 + 4 * rank], "<u4").tolist()
    return np.frombuffer(data[8 + 4 * rank :], _NUMPY_DTYPES[dtype]).reshape(shape).copy()


def decode_leaf(serializer: str, data: bytes) -> Any:
    """One leaf's bytes as this reader hands them out (see the module text)."""
    base, _, arg = serializer.partition(":")
    if base in _TYPES or base == "image":
        return data
    if base in ("str", "text"):
        return data.decode("utf-8")
    if base == "int":
        return struct.unpack("<q", data)[0]
    if base == "float":
        return struct.unpack("<d", data)[0]
    if base == "bool":
        return data[0] != 0
    if base == "pil":
        return _pil(data)
    if base == "tensor":
        return _tensor(data)
    if base == "no_header_tensor":
        values = np.frombuffer(data, dtype=np.uint8).copy()
        return torch.from_numpy(values).view(_TORCH_DTYPES[int(arg)])
    if base == "numpy":
        return _numpy(data)
    if base == "no_header_numpy":
        return np.frombuffer(data, _NUMPY_DTYPES[int(arg)]).copy()
    if base == "jpeg_array":
        return _image_list(data, 0)
    raise DatasetFormatError(f"LitData serializer {serializer!r} is not read")


def _rebuild(spec: dict[str, Any], leaves: list[Any]) -> Any:
    """The item the treespec ``spec`` describes, its leaves taken in order from ``leaves``."""
    kind = spec.get("type")
    if kind is None:
        return leaves.pop(0)
    children = [_rebuild(child, leaves) for child in spec.get("children_spec", [])]
    if kind in ("builtins.dict", "collections.OrderedDict", "collections.defaultdict"):
        context = json.loads(spec["context"])
        keys = context[1] if kind == "collections.defaultdict" else context
        return dict(zip(keys, children))
    if kind == "builtins.tuple":
        return tuple(children)
    return children  # a list, or a named tuple as its fields


def _index_parts(index: Any) -> tuple[dict[str, Any], list[Any], list[str], dict[str, Any]]:
    """A LitData index's config, chunks, leaf serializers and item treespec."""
    config = index["config"]
    return config, index["chunks"], list(config["data_format"]), json.loads(config["data_spec"])[1]


class LitDataFormat(TableFormat):
    """The chunks of one LitData split, from its ``index.json``."""

    name = "litdata"

    def __init__(self, root: StoragePath, split_part: str) -> None:
        super().__init__(root, split_part)
        index_file, prefix, (config, chunks, self.formats, self.spec) = read_index(
            root, split_part, "LitData", _index_parts
        )
        refused = [
            f"{key}={config[key]!r}"
            for key, fine in (("encryption", None), ("item_loader", "PyTreeLoader"))
            if config.get(key, fine) != fine
        ]
        self.level: str = config.get("compression_level") or "chunk"
        if config.get("compression") and self.level not in ("chunk", "batch", "sample"):
            refused.append(f"compression_level={self.level!r}")
        if config.get("ipc_compression"):
            refused.append("Arrow-row chunks")
        if refused:
            raise DatasetFormatError(f"{index_file}: {', '.join(refused)} is not read")
        for serializer in self.formats:
            base = serializer.partition(":")[0]
            if base not in _TYPES and base not in _DECODED and base != "image":
                raise DatasetFormatError(f"{index_file}: serializer {serializer!r} is not read")
        self.compression: str | None = config.get("compression")
        for chunk in chunks:
            self.shard_names.append(prefix + chunk["filename"])
            self.counts.append(int(chunk["chunk_size"]))
            self.sizes.append(int(chunk.get("chunk_bytes") or 0))
        leaf_types = [_leaf_type(serializer) for serializer in self.formats]
        names = self._rebuild(leaf_types)
        self.types = {name: value for name, value in names.items() if isinstance(value, str)}

    def _rebuild(self, leaves: list[Any]) -> dict[str, Any]:
        item = _rebuild(self.spec, list(leaves))
        return item if isinstance(item, dict) else {"item": item}

    def read_rows(self, shard_id: int, start: int, end: int) -> list[dict[str, Any]]:
        path = self.shard_path(shard_id)
        fixed: list[int | None] = [None] * len(self.formats)
        rows = []
        if self.compression and self.level == "batch":
            items = framed_items(self, shard_id, start, end)
        else:
            whole = self.compression if self.level == "chunk" else None
            items = sample_bytes(self, shard_id, start, end, whole)
            if self.compression and self.level == "sample":  # each item its own zstd frame
                items = [decompress(path, item, self.compression) for item in items]
        for row, data in enumerate(items, start):
            fields = split_sizes(path, row, data, fixed)
            try:
                leaves = [decode_leaf(s, field) for s, field in zip(self.formats, fields)]
            except (ValueError, IndexError, struct.error, UnicodeDecodeError) as exc:
                raise DatasetFormatError(f"{path}: item {row}: {exc}") from None
            rows.append(self._rebuild(leaves))
        return rows


_FRAMED = struct.Struct("<8sHHIII")  # magic, version, flags, items, rows per frame, frames
_FRAME = struct.Struct("<IIQII")  # first item, items, file offset, stored and plain lengths


def framed_items(table: TableFormat, shard_id: int, start: int, end: int) -> list[bytes]:
    """Items ``[start, end)`` of a chunk written with ``compression_level="batch"``: a header
    (``LDFZ01``, item offsets into the uncompressed items, a frame table) and zstd frames of
    ``frame_rows`` items each; only the frames holding the rows are read and inflated."""
    path = table.shard_path(shard_id)
    file = table.opened(shard_id, lambda: ShardFile(path))

    def header() -> tuple[list[int], list[tuple[int, int, int, int, int]]]:
        magic, _, _, count, _, frames = _FRAMED.unpack(file.pread(_FRAMED.size, 0))
        if magic != b"LDFZ01\0\0":
            raise DatasetFormatError(f"{path}: not a framed LitData chunk (magic {magic!r})")
        rest = file.pread(4 * (count + 1) + _FRAME.size * frames, _FRAMED.size)
        offsets = np.frombuffer(rest[: 4 * (count + 1)], "<u4").tolist()
        entries = rest[4 * (count + 1) :]
        return offsets, [_FRAME.unpack_from(entries, i * _FRAME.size) for i in range(frames)]

    offsets, frames = table.block(("framed", shard_id), header)
    items: list[bytes] = []

    def inflate(where: int, stored: int) -> bytes:
        return decompress(path, file.pread(stored, where), "zstd")

    for first, count, where, stored, _ in frames:
        if first + count <= start or first >= end:
            continue
        plain = table.block(("frame", shard_id, first), functools.partial(inflate, where, stored))
        base = offsets[first]
        items.extend(
            plain[offsets[i] - base : offsets[i + 1] - base]
            for i in range(max(first, start), min(first + count, end))
        )
    return items


def _leaf_type(serializer: str) -> str:
    base, _, arg = serializer.partition(":")
    if base == "image":
        return arg or "auto"
    return _TYPES.get(base, "")


FORMAT = LitDataFormat
