"""``compute_norm_stats``: per-dimension mean and std of qpos and action, ACT's keys.

One pass over the episodes' low-dimensional arrays (images are not read), accumulating
sums and sums of squares in float64 - exact over every frame, whatever the episode lengths
(ACT's own helper stacks equal-length episodes; the result is the same). Standard
deviations are clipped below at ``min_std`` (ACT's 1e-2), so a constant joint does not
divide by zero.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from energon_lite.flavors.episodes.index import EpisodeIndex, open_episode_index
from energon_lite.flavors.episodes.reader import EpisodeReader


def compute_norm_stats(
    dataset: str | Path | EpisodeIndex,
    *,
    episodes: list[int] | None = None,
    min_std: float = 1e-2,
) -> dict[str, np.ndarray]:
    """``{"qpos_mean", "qpos_std", "action_mean", "action_std", "example_qpos"}`` (float32).

    ``dataset`` is a folder of episodes (prepared or not) or an :class:`EpisodeIndex`;
    ``episodes`` restricts the statistics to some episode ids (e.g. the training split).
    """
    index = dataset if isinstance(dataset, EpisodeIndex) else open_episode_index(dataset)
    reader = EpisodeReader(index, cache_episodes=1)
    chosen = range(len(index)) if episodes is None else episodes
    sums: dict[str, np.ndarray] = {}
    count = 0
    example = None
    try:
        for e in chosen:
            low = reader.low_dim(int(e))
            for key, arr in (("qpos", low.qpos), ("action", low.action)):
                a = arr.astype(np.float64)
                sums[key] = sums.get(key, 0.0) + a.sum(axis=0)
                sums[key + "2"] = sums.get(key + "2", 0.0) + (a * a).sum(axis=0)
            count += len(low.qpos)
            example = low.qpos[0] if example is None else example
    finally:
        reader.close()
    if count == 0:
        raise ValueError(f"compute_norm_stats: no frames in {episodes=}")
    stats: dict[str, np.ndarray] = {}
    for key in ("qpos", "action"):
        mean = sums[key] / count
        var = np.maximum(sums[key + "2"] / count - mean * mean, 0.0)
        stats[f"{key}_mean"] = mean.astype(np.float32)
        stats[f"{key}_std"] = np.maximum(np.sqrt(var), min_std).astype(np.float32)
    stats["example_qpos"] = np.asarray(example, dtype=np.float32)
    return stats
