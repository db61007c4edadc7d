"""Real JSONL files and ``path label`` meta lists, with their images in a plain folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

from energon_lite.synth.shards import make_caption, make_image


def write_images(
    folder: str | os.PathLike[str], count: int, size: tuple[int, int] = (16, 16)
) -> list[str]:
    """Write ``count`` JPEGs ``img/000000.jpg ...`` under ``folder``; return their relative names."""
    folder = Path(folder)
    names = []
    for index in range(count):
        name = f"img/{index:06d}.jpg"
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        make_image(index, size).save(folder / name, format="JPEG", quality=90)
        names.append(name)
    return names


def write_caption_jsonl(
    path: str | os.PathLike[str], count: int, *, image_names: list[str] | None = None
) -> Path:
    """One JSON object per line: ``{"idx", "caption"[, "image"]}`` (image names cycle)."""
    path = Path(path)
    with open(path, "w", encoding="utf-8") as file:
        for index in range(count):
            row: dict[str, object] = {"idx": index, "caption": make_caption(index)}
            if image_names:
                row["image"] = image_names[index % len(image_names)]
            file.write(json.dumps(row) + "\n")
    return path


def write_meta_list(path: str | os.PathLike[str], image_names: list[str], count: int) -> Path:
    """The document's classification list: ``<image path> <label>`` per line."""
    path = Path(path)
    with open(path, "w", encoding="utf-8") as file:
        for index in range(count):
            file.write(f"{image_names[index % len(image_names)]} {index % 10}\n")
    return path
