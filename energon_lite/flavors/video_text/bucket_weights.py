"""Weights for synchronised buckets, from the table itself: every rank computes the same.

In the synchronised mode (:mod:`energon_lite.stages.bucket_sync`) step ``s`` of every rank
emits the bucket ``choose_bucket(seed, s, weights)``. A rank's stream must then supply each
bucket's batches as often as they are chosen, or samples of the other buckets pile up. So
the weights are derived from how many samples of the split fall into each bucket
(``count``) and the bucket's batch size (``count / batch_size`` batches per pass):

* **aspect-ratio form** (``(weight, batch_size)`` per bucket): bucket ``b``
  is chosen with probability ``weight_b / sum(weights)`` exactly. To
  keep supply and demand equal, samples of a bucket that has more batches than its weight
  asks for are thinned: each is kept with probability
  ``keep_b = (weight_b / batches_b) / max_c(weight_c / batches_c)`` (1 for the bucket the
  data supplies least, relative to its weight). The decision is a pure function of the
  sample's restore key, so it is the same on every rank and after a resume, and a
  different subset is kept every epoch. Buckets with no samples in the table get no
  weight (a plain weighted sampler would fail on them).
* **resolution form** (Open-Sora's keep probabilities): weights are the expected batches per
  pass, ``count_b / batch_size_b``, so every batch of a pass is visited once, as Open-Sora's
  sampler does; nothing is thinned.

Counting reads the memory-mapped ``num_frames``/``height``/``width`` columns and assigns each
distinct shape once (a row with ``num_frames == 1`` counts as an image); for the
resolution form, whose assignment is random per sample, a shape's count is spread over its
buckets by their exact probabilities (``BucketAssigner.distribution``), so every bucket a
sample can reach has a weight. Cost: one ``np.unique`` over the split.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from energon_lite.flavors.video_text.buckets import BucketAssigner, BucketId
from energon_lite.flavors.video_text.layout import load_marker, meta_file, resolve_prepared
from energon_lite.storage import RemotePath


def split_shapes(
    path: str | os.PathLike[str] | RemotePath, split_part: str
) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ``(num_frames, height, width)`` rows of a prepared split and their counts."""
    folder = resolve_prepared(path)
    info = load_marker(folder)
    columns = [
        np.load(meta_file(folder, f"{n}.npy"), mmap_mode="r")
        for n in ("num_frames", "height", "width")
    ]
    split = info["splits"].get(split_part)
    if split is None:
        return np.zeros((0, 3), dtype=np.int64), np.zeros(0, dtype=np.int64)
    rows = (
        None if split["rows"] is None else np.load(meta_file(folder, split["rows"]), mmap_mode="r")
    )
    table = np.stack(
        [np.asarray(c if rows is None else c[rows], dtype=np.int64) for c in columns], 1
    )
    shapes, counts = np.unique(table, axis=0, return_counts=True)
    return shapes, counts


def bucket_counts(
    assigner: BucketAssigner,
    shapes: np.ndarray,
    counts: np.ndarray,
    num_frames_of: Callable[[int], int],
) -> Counter[BucketId]:
    """Expected samples per bucket; ``num_frames_of(T)`` is the ``T`` a row can supply."""
    out: Counter[BucketId] = Counter()
    for (t, h, w), n in zip(shapes.tolist(), counts.tolist()):
        for bucket, p in assigner.distribution(num_frames_of(t), h, w).items():
            out[bucket] += n * p
    return out


def sync_weights(
    assigner: BucketAssigner, counts: Counter[BucketId]
) -> tuple[dict[BucketId, float], dict[BucketId, float] | None]:
    """``(choose_bucket weights, keep probabilities or None)`` (see the module docstring)."""
    batches = {b: c / b.batch_size for b, c in counts.items() if c > 0}
    if not assigner.config.weighted:
        return batches, None
    configured = assigner.config.weights()
    weights = {b: configured.get(b, 0.0) for b in batches}
    ratio = {b: weights[b] / batches[b] for b in batches}
    top = max(ratio.values(), default=0.0)
    keep = {b: (r / top if top > 0 else 0.0) for b, r in ratio.items()}
    return {b: w for b, w in weights.items() if w > 0}, keep


def describe(weights: dict[BucketId, float]) -> dict[str, Any]:
    """Readable weights for logs: ``{"T x H x W (ratio)": probability}``."""
    total = sum(weights.values()) or 1.0
    return {
        f"{b.num_frames}x{b.height}x{b.width} ({b.aspect_ratio})": round(w / total, 4)
        for b, w in sorted(weights.items())
    }
