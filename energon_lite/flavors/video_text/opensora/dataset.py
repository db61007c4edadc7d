"""``VariableVideoTextDataset``: Open-Sora's dataset arguments, over prepared tables.

It holds settings, not rows: the tables (each CSV prepared once into a memory-mapped
index, next to it, on first use or when the CSV changed), how frames are sampled and which
transform shapes them. ``prepare_dataloader`` turns it into a loader.

Several tables (``data_path`` a list, plus ``image_data_path``) are read as one: a
metadataset that takes every row of every table once per pass (``blend_epochized`` with
``repetitions: 1``), written next to the first table as ``.<stem>.opensora-<hash>.yaml``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from energon_lite.errors import ConfigError, DatasetFormatError, logger
from energon_lite.flavors.video_text.layout import load_marker, resolve_prepared
from energon_lite.flavors.video_text.opensora.fixed import FixedShapeTaskEncoder
from energon_lite.flavors.video_text.prepare import prepare_video_text
from energon_lite.flavors.video_text.task_encoder import VideoTextTaskEncoder
from energon_lite.flavors.video_text.transforms import TEMPORAL_SAMPLINGS, get_transform

PathLike = str | os.PathLike[str]


def _paths(value: PathLike | Sequence[PathLike] | None, name: str) -> list[Path]:
    if value is None:
        return []
    items = [value] if isinstance(value, (str, os.PathLike)) else list(value)
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise ConfigError(f"{name}: {item!r} is not a path")
    return [Path(item) for item in items]


def prepared_table(path: Path, images: bool = False) -> Path:
    """The prepared folder of a CSV (preparing it when missing or stale) or of a folder."""
    if path.suffix != ".csv":
        return resolve_prepared(path)
    if not path.is_file():
        raise ConfigError(f"table {path} does not exist")
    try:
        return resolve_prepared(path)
    except DatasetFormatError as exc:
        logger.info("%s; preparing it now", exc)
    report = prepare_video_text(path, default_num_frames=1 if images else None)
    return report.output


class VariableVideoTextDataset:
    """Open-Sora's ``VariableVideoTextDataset`` arguments (see the package docstring).

    Arguments after ``data_path`` are keyword-only: Open-Sora's versions order them
    differently, and configs pass them by name.
    ``num_frames`` and ``image_size`` are used without a bucket config (fixed shape);
    with one, the bucket sets each batch's shape. ``split_part`` picks the split of
    prepared tables (``train`` unless prepared with a split ratio).
    """

    def __init__(
        self,
        data_path: PathLike | Sequence[PathLike] | None = None,
        *,
        image_data_path: PathLike | Sequence[PathLike] | None = None,
        num_frames: int | None = None,
        frame_interval: int = 1,
        image_size: tuple[int | None, int | None] = (None, None),
        transform_name: str = "resize_crop",
        temporal_sampling: str = "window",
        split_part: str = "train",
    ) -> None:
        videos, images = _paths(data_path, "data_path"), _paths(image_data_path, "image_data_path")
        if not videos and not images:
            raise ConfigError("VariableVideoTextDataset needs data_path (and/or image_data_path)")
        if frame_interval < 1:
            raise ConfigError(f"{frame_interval=} must be >= 1")
        if temporal_sampling not in TEMPORAL_SAMPLINGS:
            raise ConfigError(f"{temporal_sampling=} must be one of {TEMPORAL_SAMPLINGS}")
        get_transform(transform_name)  # an unknown name fails here, not in a worker
        self.tables = [prepared_table(p) for p in videos]
        self.tables += [prepared_table(p, images=True) for p in images]
        self.num_frames = num_frames
        self.frame_interval = frame_interval
        self.image_size = tuple(image_size)
        self.transform_name = transform_name
        self.temporal_sampling = temporal_sampling
        self.split_part = split_part
        self.counts = []
        for folder in self.tables:
            split = load_marker(folder)["splits"].get(split_part)
            if split is None:
                raise ConfigError(f"{folder} has no split {split_part!r}")
            self.counts.append(int(split["count"]))

    def __len__(self) -> int:
        return sum(self.counts)

    def table_splits(self) -> list[tuple[Path, str]]:
        return [(folder, self.split_part) for folder in self.tables]

    def loader_path(self) -> Path:
        """What ``get_train_dataset`` reads: the one table, or a metadataset of all."""
        if len(self.tables) == 1:
            return self.tables[0]
        lines = [
            f"      - {{repetitions: 1, path: '{folder.resolve()}'}}" for folder in self.tables
        ]
        text = "\n".join(
            ["__module__: energon_lite", "__class__: MetadatasetV2", "splits:",
             f"  {self.split_part}:", "    blend_epochized:", *lines, ""]
        )  # fmt: skip
        digest = hashlib.blake2b(text.encode(), digest_size=6).hexdigest()
        first = self.tables[0]
        path = first.parent / f".{first.name.removesuffix('.energon')}.opensora-{digest}.yaml"
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        return path

    def task_encoder(
        self,
        bucket_config: Mapping[Any, Any] | None,
        *,
        seed: int = 0,
        training: bool = True,
        sync_buckets: bool = True,
    ) -> VideoTextTaskEncoder | FixedShapeTaskEncoder:
        """The bucketed task encoder, or the fixed-shape one when ``bucket_config`` is None."""
        if bucket_config is not None:
            return VideoTextTaskEncoder(
                bucket_config, seed=seed, training=training, frame_interval=self.frame_interval,
                temporal_sampling=self.temporal_sampling, transform_name=self.transform_name,
                sync_buckets=sync_buckets,
            )  # fmt: skip
        height, width = self.image_size
        if self.num_frames is None or height is None or width is None:
            raise ConfigError(
                "without bucket_config, VariableVideoTextDataset needs num_frames and "
                f"image_size=(H, W) (got num_frames={self.num_frames!r}, "
                f"image_size={self.image_size!r})"
            )
        return FixedShapeTaskEncoder(
            self.num_frames, (height, width), frame_interval=self.frame_interval,
            temporal_sampling=self.temporal_sampling, transform_name=self.transform_name,
            training=training,
        )  # fmt: skip
