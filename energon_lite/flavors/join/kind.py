"""Registers the join kind: a join spec file that a metadataset's ``join:`` wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from energon_lite.metadataset.join import SUFFIX
from energon_lite.sources.base import Source
from energon_lite.sources.kinds import DatasetKind, register_kind


def _is_join_spec(path: Path) -> bool:
    return path.name.endswith(SUFFIX) and path.is_file()


def _open(path: Path, split_part: str, **options: Any) -> Source:
    from energon_lite.flavors.join.source import JoinedSource

    return JoinedSource(path, split_part, **options)


KIND = register_kind(DatasetKind("join", detect=_is_join_spec, open=_open))
