"""Small real video-text tables for tests, docs and benchmarks.

``make_media`` encodes a few test videos (``energon_lite.synth.av``: each frame shows its
index) in several containers and sizes plus a JPEG; ``write_table`` writes an Open-Sora
CSV that references them, repeating them as often as asked.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

from energon_lite.synth.av import frame_pattern, make_video


@dataclass(frozen=True)
class Media:
    """One media file and the CSV columns that describe it."""

    path: str  # relative to the table's folder
    num_frames: int
    height: int
    width: int
    fps: float


DEFAULT_MEDIA = (
    # (file, container, frames, height, width, fps)
    ("media/wide.mp4", "mp4", 48, 48, 64, 24),
    ("media/tall.mkv", "mkv", 40, 64, 48, 30),
    ("media/small.webm", "webm", 24, 32, 48, 25),
    ("media/old.avi", "avi", 36, 48, 64, 12),
)


def make_media(folder: str | os.PathLike[str], gop_size: int = 8) -> list[Media]:
    """Encode the default videos and one 48x64 JPEG under ``folder/media``."""
    from PIL import Image

    folder = Path(folder)
    (folder / "media").mkdir(parents=True, exist_ok=True)
    media = []
    for name, container, frames, height, width, fps in DEFAULT_MEDIA:
        make_video(folder / name, container, num_frames=frames, width=width, height=height,
                   fps=fps, gop_size=gop_size)  # fmt: skip
        media.append(Media(name, frames, height, width, fps))
    Image.fromarray(frame_pattern(5, 64, 48)).save(folder / "media/still.jpg", quality=95)
    media.append(Media("media/still.jpg", 1, 48, 64, 0.0))
    return media


def write_table(
    csv_path: str | os.PathLike[str],
    media: list[Media],
    rows: int,
    *,
    extra: dict[str, list[str]] | None = None,
) -> Path:
    """A CSV of ``rows`` rows cycling through ``media``; ``extra`` adds columns (cycled too).

    Texts are ``"clip <row>"``; an image row gets an empty fps.
    """
    csv_path = Path(csv_path)
    extra = extra or {}
    with open(csv_path, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(["path", "text", "num_frames", "height", "width", "fps", *extra])
        for row in range(rows):
            m = media[row % len(media)]
            fps = f"{m.fps:g}" if m.num_frames > 1 else ""
            cells = [values[row % len(values)] for values in extra.values()]
            writer.writerow([m.path, f"clip {row}", m.num_frames, m.height, m.width, fps, *cells])
    return csv_path
