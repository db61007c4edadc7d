"""``energon-lite analyze-debug``: Energon's analysis of worker debug sample logs.

Reads the JSON-lines files that ``WorkerConfig(worker_debug_path=..., worker_log_level=1)``
writes (a folder's ``*.jsonl``, or files), finds the loaders in them
(``SavableLoader.__init__``) and the batches each handed out (``SavableDataLoader.yield``,
with their sample ``keys``), and draws a heatmap: one row per sample key (in order of first
appearance), one column per step (the loader's ``global_idx``), coloured by rank. A sample
that comes back at regular steps shows as a pattern; a well-shuffled run as noise.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# one colour per rank (cycled)
_COLOURS = np.array(
    [[230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200], [245, 130, 48],
     [145, 30, 180], [70, 240, 240], [240, 50, 230], [210, 245, 60], [0, 128, 128]],
    dtype=np.int64,
)  # fmt: skip


@dataclass
class LoaderLog:
    """One loader's batches, from all the files that mention it."""

    id: int
    modality: str
    path: str
    steps: dict[tuple[int, int], list[str]] = field(default_factory=dict)  # (rank, step)

    @property
    def num_steps(self) -> int:
        return 1 + max((step for _, step in self.steps), default=-1)


def log_files(paths: list[Path]) -> list[Path]:
    """The ``*.jsonl`` files of ``paths`` (folders) and the files given."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(path.glob("*.jsonl"))
        elif path.is_file():
            files.append(path)
        else:
            raise SystemExit(f"energon-lite analyze-debug: {path}: no such file or folder")
    if not files:
        raise SystemExit("energon-lite analyze-debug: no .jsonl log files found")
    return files


def _events(path: Path, kinds: tuple[str, ...]) -> Iterator[dict[str, Any]]:
    """The events of ``kinds`` in one log; a line that is not JSON text (not UTF-8, not
    JSON, nested too deep, a number past Python's digit limit) is skipped and counted."""
    skipped = 0
    with open(path, "rb") as file:
        for number, raw in enumerate(file, 1):
            if not any(f'"t": "{kind}"'.encode() in raw for kind in kinds):
                continue
            try:
                event = json.loads(raw.decode("utf-8"))
            except (ValueError, RecursionError) as exc:  # JSON and UTF-8 errors are ValueErrors
                skipped += 1
                if skipped <= _SHOWN:
                    print(f"{path}:{number}: {_why(exc)}; skipped")
                continue
            if isinstance(event, dict):
                yield event
    if skipped:
        print(f"{path}: {skipped} unreadable line(s) skipped")


_SHOWN = 3  # unreadable lines named one by one per file; the rest are counted


def _why(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 (byte {exc.start})"
    if isinstance(exc, RecursionError):
        return "nested too deep"
    if isinstance(exc, json.JSONDecodeError):
        return "not a JSON line"
    return f"not readable JSON ({str(exc).splitlines()[0][:80]})"


def read_loaders(files: list[Path], skip: int = 0) -> dict[int, LoaderLog]:
    """Every loader of ``files`` with the keys of each step from ``skip`` on."""
    loaders: dict[int, LoaderLog] = {}
    kinds = ("SavableLoader.__init__", "SavableDataLoader.yield")
    for path in files:
        for event in _events(path, kinds):
            loader_id = event.get("id")
            if not isinstance(loader_id, int):
                continue
            if event["t"] == "SavableLoader.__init__":
                if loader_id not in loaders:
                    loaders[loader_id] = LoaderLog(
                        loader_id, str(event.get("m", "train")), str(event.get("path", "?"))
                    )
                continue
            loader = loaders.setdefault(loader_id, LoaderLog(loader_id, "train", "?"))
            step = event.get("global_idx")
            keys = event.get("keys")
            if isinstance(step, int) and step >= skip and isinstance(keys, list):
                loader.steps[(int(event.get("r") or 0), step - skip)] = [str(k) for k in keys]
    return loaders


def heatmap(
    loader: LoaderLog, samples: int, steps: int, gain: float, colours: bool
) -> tuple[np.ndarray, int]:
    """The heatmap image (rows: sample keys, columns: steps, each scaled down to at most
    ``samples`` x ``steps`` cells) and the number of unique keys."""
    key_ids: dict[str, int] = {}
    points = []
    for (rank, step), keys in sorted(loader.steps.items(), key=lambda item: item[0][::-1]):
        for key in keys:
            points.append((key_ids.setdefault(key, len(key_ids)), step, rank))
    rows, cols = max(1, len(key_ids)), max(1, loader.num_steps)
    row_scale, col_scale = -(-rows // samples), -(-cols // steps)  # ceil
    image = np.zeros((-(-rows // row_scale), -(-cols // col_scale), 3), dtype=np.float64)
    for key_id, step, rank in points:
        colour = _COLOURS[rank % len(_COLOURS)] if colours else np.array([255, 255, 255])
        image[key_id // row_scale, step // col_scale] += colour
    peak = image.max() or 1.0
    return np.clip(image * gain / peak * 255 / 10, 0, 255).astype(np.uint8), len(key_ids)


_MARGIN = 48  # pixels left of and below the cells, for the axes' labels


def readable(image: np.ndarray, steps: int, keys: int, size: int = 600) -> Any:
    """The heatmap for a person: cells scaled up (nearest) to about ``size`` pixels a side,
    empty cells white instead of black, and both axes labelled with their ranges."""
    from PIL import Image, ImageDraw, ImageFont

    rows, cols = image.shape[:2]
    scale_y, scale_x = max(1, size // rows), max(1, size // cols)
    cells = np.where(image.sum(axis=2, keepdims=True) == 0, 255, image).astype(np.uint8)
    cells = cells.repeat(scale_y, axis=0).repeat(scale_x, axis=1)
    height, width = cells.shape[:2]
    canvas = Image.new("RGB", (width + _MARGIN + 8, height + _MARGIN + 8), "white")
    canvas.paste(Image.fromarray(cells), (_MARGIN, 8))
    draw = ImageDraw.Draw(canvas)
    font = ImageFont.load_default()
    left, top, right, bottom = _MARGIN - 1, 7, _MARGIN + width, 8 + height
    draw.rectangle([left, top, right, bottom], outline="black")
    draw.text((left, bottom + 4), "0", fill="black", font=font)
    draw.text(
        (right - 6 * len(str(steps - 1)), bottom + 4), str(steps - 1), fill="black", font=font
    )
    draw.text((left + width // 2 - 40, bottom + 18), "step (global_idx)", fill="black", font=font)
    draw.text((4, top), "key 0", fill="black", font=font)
    draw.text((4, bottom - 12), f"{keys - 1}", fill="black", font=font)
    draw.text((4, top + height // 2), "keys", fill="black", font=font)
    return canvas


def analyze(
    paths: list[Path],
    heatmap_path: Path,
    *,
    heatmap_steps: int = 1000,
    heatmap_samples: int = 1000,
    heatmap_gain: float = 10.0,
    include_modality: str = "train",
    skip: int = 0,
    colours: bool = True,
) -> int:
    """Print what the logs hold and write the heatmap of the chosen loader; 0 on success."""
    from PIL import Image

    files = log_files(paths)
    print(f"Analyzing {len(files)} logs...")
    loaders = read_loaders(files, skip)
    print("Available loaders:")
    for loader in loaders.values():
        print(f"  {loader.id}: {loader.modality} {loader.path} {loader.num_steps} steps")
    modalities = {m.strip() for m in include_modality.split(",") if m.strip()}
    chosen = [ld for ld in loaders.values() if ld.modality in modalities and ld.steps]
    if not chosen:
        raise SystemExit(
            f"energon-lite analyze-debug: no loader of modality {sorted(modalities)} with "
            "logged batches (log with worker_log_level >= 1; --include-modality train,val)"
        )
    loader = max(chosen, key=lambda ld: ld.num_steps)
    if len(chosen) > 1:
        print(f"Using loader {loader.id} (the one with the most steps)")
    image, unique = heatmap(loader, heatmap_samples, heatmap_steps, heatmap_gain, colours)
    print(f"Found {unique} unique sample keys, {loader.num_steps} steps")
    heatmap_path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(image).save(heatmap_path)
    print(f"Wrote the heatmap ({image.shape[0]} x {image.shape[1]}) to {heatmap_path}")
    # Energon's picture above has a pixel per cell; this one is for reading (axes, scaled)
    view = heatmap_path.with_name(heatmap_path.stem + ".axes.png")
    picture = readable(image, loader.num_steps, unique)
    picture.save(view)
    print(f"Wrote it scaled, with axes ({picture.height} x {picture.width}), to {view}")
    return 0
