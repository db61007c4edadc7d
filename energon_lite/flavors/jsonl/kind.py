"""Registers the line-file kind: a JSONL file or a ``path label`` meta list (and its index)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from energon_lite.flavors.jsonl.layout import LINE_SUFFIXES, is_line_file
from energon_lite.sources.kinds import DatasetKind, register_kind

if TYPE_CHECKING:
    from energon_lite.sources.base import Source
    from energon_lite.storage import StoragePath


def _open(path: StoragePath, split_part: str, **options: Any) -> Source:
    from energon_lite.flavors.jsonl.source import JsonlSource

    return JsonlSource(path, split_part, **options)


def _prepare(path: Path, options: Mapping[str, Any]) -> str:
    from energon_lite.flavors.jsonl.index import prepare_lines

    info = prepare_lines(
        path,
        fmt=options.get("format"),
        media_root=options.get("media_root"),
        progress=bool(options.get("progress", True)),
    )
    lines = [f"Found {info.count} samples in {info.path} ({info.format}); wrote {info.path}.idx"]
    if info.media_root is not None:
        lines.append(f"  media root: {info.media_root} (cookers read it as aux 'media')")
    lines.append("Done")
    return "\n".join(lines)


def _lint(path: Path, progress: bool) -> list[str]:
    """The whole content against the hash prepare recorded (an open trusts an unchanged
    mtime); the samples are decoded after this by ``lint`` itself."""
    from energon_lite.flavors.jsonl.index import read_info, whole_digest

    recorded = read_info(path).get("blake2b")
    if isinstance(recorded, str) and whole_digest(path) != recorded:
        return [
            f"{path}: content changed since it was prepared (its whole-content hash differs); "
            f"re-run `energon-lite prepare {path}`"
        ]
    return []


KIND = register_kind(
    DatasetKind(
        "jsonl",
        detect=is_line_file,
        open=_open,
        prepare=_prepare,
        lint=_lint,
        suffixes=LINE_SUFFIXES,
        remote=True,  # read through ranged GETs, as Energon reads msc:// line files
    )
)
