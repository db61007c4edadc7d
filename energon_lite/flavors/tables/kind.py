"""Registers the table formats read in place: Parquet (and the Hugging Face Hub layout), Hugging
Face ``save_to_disk`` folders (Arrow), MosaicML Streaming's MDS and LitData's chunks."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from energon_lite.flavors.tables.layout import detect, marker, split_names
from energon_lite.sources.base import Source
from energon_lite.sources.kinds import DatasetKind, register_kind
from energon_lite.storage import StoragePath


def _open(format_name: str, path: StoragePath, split_part: str, **options: Any) -> Source:
    from energon_lite.flavors.tables.source import TableSource

    return TableSource(path, split_part, format_name=format_name, **options)


def _prepare(format_name: str, path: Path, options: Mapping[str, Any]) -> str:
    from energon_lite.flavors.tables.prepare import prepare_table

    return prepare_table(path, format_name, options)


def _kind(format_name: str, *, remote: bool, suffixes: tuple[str, ...] = ()) -> DatasetKind:
    return register_kind(
        DatasetKind(
            format_name,
            detect=functools.partial(detect, format_name=format_name),
            open=functools.partial(_open, format_name),
            prepare=functools.partial(_prepare, format_name),
            splits=functools.partial(split_names, format_name=format_name),
            suffixes=suffixes,
            remote=remote,  # read through the storage layer's ranged reads
            marker=marker(format_name),
        )
    )


ARROW = _kind("arrow", remote=False)  # memory-mapped stream files: local folders only
LITDATA = _kind("litdata", remote=True)
MDS = _kind("mds", remote=True)
PARQUET = _kind("parquet", remote=True, suffixes=(".parquet",))
