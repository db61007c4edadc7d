"""What ``energon-lite info`` and ``lint`` add for a prepared video-text table (see ``kind``).

``info`` names the table, its columns and where media paths point. ``lint`` checks every row's
media file once per distinct file: it exists, opens (PyAV for videos, Pillow for images) and
has the width and height the table says.
"""

from __future__ import annotations

import os
from pathlib import Path

from tqdm import tqdm

from energon_lite.flavors.video_text.layout import load_marker, resolve_prepared
from energon_lite.flavors.video_text.source import VideoTextSource

_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp")


def video_text_info(root: str | os.PathLike[str]) -> list[str]:
    info = load_marker(resolve_prepared(root))
    return [
        f"  video-text table {info['csv']}: {info['num_rows']} rows",
        f"  columns: {', '.join(info['columns'])}",
        f"  media paths relative to {info['media_base']}",
    ]


def _media_size(path: str) -> tuple[int | None, int | None]:
    """(width, height) of an image or of a video's first stream."""
    if path.lower().endswith(_IMAGE_SUFFIXES):
        from PIL import Image

        with Image.open(path) as image:
            return image.size
    from energon_lite.av.decoder import AVDecoder

    with AVDecoder(path) as decoder:
        meta = decoder.get_metadata()
        if not decoder.has_video_stream():
            raise ValueError("no video stream")
        return meta.video_width, meta.video_height


def lint_table(root: str | os.PathLike[str], progress: bool) -> list[str]:
    """The media problems of every split of the table."""
    folder = resolve_prepared(root)
    problems = []
    for split_part in load_marker(folder)["splits"]:
        problems.extend(lint_media(VideoTextSource(folder, split_part), split_part, progress))
    return problems


def lint_media(source: VideoTextSource, split_part: str, progress: bool) -> list[str]:
    """One problem line per row whose media is missing, unreadable or of another size."""
    checked: dict[str, str | tuple[int | None, int | None]] = {}
    problems = []
    bar = tqdm(total=len(source), desc=f"media {split_part}", unit="row", disable=not progress)
    for position in range(len(source)):
        shard_id, index = source.locate(position)
        key, parts = source.read(shard_id, index)
        row = parts["row"]
        path = row["path"]
        if path not in checked and len(checked) < 100_000:
            try:
                checked[path] = (
                    _media_size(path) if Path(path).is_file() else "media file does not exist"
                )
            except Exception as exc:  # PyAV and Pillow raise many types for bad files
                checked[path] = f"cannot open: {type(exc).__name__}: {exc}"
        found = checked.get(path)
        where = f"{split_part}: {key}: {path}"
        if isinstance(found, str):
            problems.append(f"{where}: {found}")
        elif found is not None and None not in found and found != (row["width"], row["height"]):
            problems.append(
                f"{where}: the table says {row['width']}x{row['height']}, the file is "
                f"{found[0]}x{found[1]}"
            )
        bar.update()
    bar.close()
    return problems
