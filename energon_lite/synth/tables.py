"""Image-caption data written by the libraries that own each table format (tests, benchmarks).

Each writer takes the same rows (JPEG bytes and a caption per sample) and writes them with the
format's own library, imported here when called: Hugging Face ``datasets`` (an ``Image``
feature; ``to_parquet`` in the Hub layout, ``save_to_disk``), MosaicML Streaming's
``MDSWriter`` and ``litdata.optimize``.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import io
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from energon_lite.rng import rng_for


def caption_rows(
    count: int, size: tuple[int, int] = (8, 8), seed: int = 0
) -> list[tuple[bytes, str]]:
    """``count`` (JPEG bytes, caption) pairs of random ``size`` images; caption i names i."""
    rng = rng_for(seed, "caption_rows")
    rows = []
    for i in range(count):
        pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
        rows.append((buffer.getvalue(), f"sample {i}: a picture"))
    return rows


def hf_dataset(rows: Sequence[tuple[bytes, str]]) -> Any:
    """A ``datasets.Dataset`` with an ``image`` (``Image`` feature) and a ``caption``."""
    import datasets

    features = datasets.Features({"image": datasets.Image(), "caption": datasets.Value("string")})
    return datasets.Dataset.from_dict(
        {
            "image": [{"bytes": jpg, "path": None} for jpg, _ in rows],
            "caption": [caption for _, caption in rows],
        },
        features=features,
    )


def write_hf_parquet(
    folder: Path,
    rows: Sequence[tuple[bytes, str]],
    *,
    files: int = 2,
    split: str = "train",
    config: str = "",
    rows_per_group: int | None = None,
) -> Path:
    """The Hub layout: ``[<config>/]data/<split>-0000i-of-0000N.parquet`` via ``to_parquet``."""
    dataset = hf_dataset(rows)
    where = folder / config / "data" if config else folder / "data"
    where.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        part = dataset.shard(num_shards=files, index=i, contiguous=True)
        name = where / f"{split}-{i:05d}-of-{files:05d}.parquet"
        options = {} if rows_per_group is None else {"batch_size": rows_per_group}
        part.to_parquet(str(name), **options)
    return folder


def write_save_to_disk(folder: Path, rows: Sequence[tuple[bytes, str]], shards: int = 2) -> Path:
    hf_dataset(rows).save_to_disk(str(folder), num_shards=shards)
    return folder


def mds_writer_class() -> Any:
    """MosaicML Streaming's own ``MDSWriter``, imported from its module
    (``streaming.base.format.mds.writer``) without running the ``streaming`` and
    ``streaming.base`` package ``__init__`` files.

    Those two import every Streaming dataset class, and with them transformers and
    torchvision, which writing never uses: Streaming 0.13 pins transformers below 5 (refused
    beside ``datasets`` 5), and PyPI's torchvision does not load beside a CPU build of torch.
    The writer's modules themselves import numpy, Pillow, torch, xxhash, zstd, Brotli and
    python-snappy (the ``formats-test`` extra; the test command installs Streaming with
    ``--no-deps``). The two packages are registered empty, pointing at Streaming's folders,
    unless ``streaming`` is already imported; its other modules still import as usual, but a
    later ``from streaming import StreamingDataset`` in the same process finds nothing.
    """
    if "streaming" not in sys.modules:
        found = importlib.util.find_spec("streaming")
        if found is None or not found.submodule_search_locations:
            raise ModuleNotFoundError("No module named 'streaming'", name="streaming")
        folder = Path(next(iter(found.submodule_search_locations)))
        for name, path in (("streaming", folder), ("streaming.base", folder / "base")):
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = [str(path)]
            sys.modules[name] = importlib.util.module_from_spec(spec)
    return importlib.import_module("streaming.base.format.mds.writer").MDSWriter


def write_mds(
    folder: Path,
    columns: dict[str, str],
    samples: Sequence[dict[str, Any]],
    *,
    compression: str | None = None,
    size_limit: int | str = 1 << 14,
) -> Path:
    """``samples`` with ``MDSWriter(columns=...)`` (small shards: several per folder)."""
    with mds_writer_class()(
        out=str(folder), columns=columns, compression=compression, size_limit=size_limit
    ) as writer:
        for sample in samples:
            writer.write(sample)
    return folder


def write_litdata(
    folder: Path, make_item: Any, count: int, chunk_size: int = 16, compression: str | None = None
) -> Path:
    """``make_item(i)`` for ``i < count`` written into ``folder`` by LitData's chunk writer
    (``litdata.streaming.Cache``, what ``optimize`` runs in each of its worker processes),
    here in this process: ``optimize`` spawns a worker, slow to start on a small machine."""
    from litdata.streaming.cache import Cache

    cache = Cache(str(folder), chunk_size=chunk_size, compression=compression)
    for i in range(count):
        cache[i] = make_item(i)
    cache.done()
    cache.merge()
    return folder


def optimize_litdata(folder: Path, make_item: Any, count: int, workers: int = 1) -> Path:
    """``litdata.optimize(make_item, range(count))`` into ``folder`` (the benchmark's)."""
    import litdata

    litdata.optimize(
        fn=make_item,
        inputs=list(range(count)),
        output_dir=str(folder),
        chunk_bytes="64MB",
        num_workers=workers,
        mode="overwrite",
    )
    return folder
