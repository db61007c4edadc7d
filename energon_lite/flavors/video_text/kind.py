"""Registers the video-text kind: a CSV of clips (or the folder it was prepared into)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from energon_lite.flavors.video_text.layout import is_video_text, resolve_prepared
from energon_lite.sources.base import Source
from energon_lite.sources.kinds import DatasetKind, register_kind


def _open(path: Path, split_part: str, **options: Any) -> Source:
    # here, not at the top: the registry imports this module in every command (decode and
    # the source import torch)
    from energon_lite.decode.decoder import require_av
    from energon_lite.flavors.video_text.source import VideoTextSource

    require_av(f"video-text dataset {path}")
    return VideoTextSource(path, split_part, **options)


def _describe(path: Path) -> list[str]:
    from energon_lite.flavors.video_text.commands import video_text_info

    return video_text_info(path)


def _lint(path: Path, progress: bool) -> list[str]:
    from energon_lite.flavors.video_text.commands import lint_table

    return lint_table(path, progress)


def _prepare(path: Path, options: Mapping[str, Any]) -> str:
    from energon_lite.flavors.video_text.prepare import prepare_video_text

    report = prepare_video_text(
        path,
        options.get("output"),
        split_ratio=options.get("split_ratio"),
        missing_media=options.get("missing_media") or "warn",
    )
    lines = [f"Indexed {report.num_rows} rows into {report.output}; splits: {report.splits}"]
    if report.num_missing_media:
        lines.append(
            f"  {report.num_missing_media} row(s) name a missing media file (skipped at load)"
        )
    return "\n".join(lines)


KIND = register_kind(
    DatasetKind(
        "video_text",
        detect=is_video_text,
        open=_open,
        resolve=resolve_prepared,
        prepare=_prepare,
        describe=_describe,
        lint=_lint,
        suffixes=(".csv",),
        remote=True,  # a table and its media in object storage read through the storage layer
        marker=".nv-meta/video_text.json",
    )
)
