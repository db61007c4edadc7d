"""``len()`` of datasets and loaders by Energon's rules (megatron.energon as the oracle where
installed): a blend counts every leaf's samples once (weights and
``shuffle_over_epochs_multiplier`` left out), ``blend_epochized`` counts its epoch's quotas
with fractional repetitions rounded down, ``virtual_epoch_length`` is the length."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import write_text_leaves

from energon_lite import WorkerConfig, get_loader, get_train_dataset

BLEND = """__module__: megatron.energon
__class__: MetadatasetV2
splits:
  train:
    blend:
      - weight: 1
        path: ds1
        shuffle_over_epochs_multiplier: 3
      - weight: 2
        path: ds2
"""
EPOCHIZED = """__module__: megatron.energon
__class__: MetadatasetV2
splits:
  train:
    blend_epochized:
      - repetitions: 0.7
        path: ds1
      - repetitions: 1.5
        path: ds2
"""


@pytest.fixture(scope="module")
def two_leaves(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two text datasets of 55 samples in shards of 10, and both metadatasets over them."""
    root = tmp_path_factory.mktemp("lengths")
    write_text_leaves(root, {"ds1": 55, "ds2": 55}, 10, 4)
    (root / "blend.yaml").write_text(BLEND)
    (root / "epochized.yaml").write_text(EPOCHIZED)
    return root


def _lens(lib: object, path: Path, **kwargs: object) -> tuple[int, int]:
    kwargs.setdefault("worker_config", lib.WorkerConfig(rank=0, world_size=1, num_workers=0))  # type: ignore[attr-defined]
    dataset = lib.get_train_dataset(  # type: ignore[attr-defined]
        path, shuffle_buffer_size=None, max_samples_per_sequence=None, **kwargs
    )
    return len(dataset), len(lib.get_loader(dataset))  # type: ignore[attr-defined]


CASES = [
    ("blend.yaml", {"batch_size": 10}, (11, 11)),  # (55 + 55) / 10, weights left out
    ("blend.yaml", {"batch_size": 7}, (16, 16)),
    ("epochized.yaml", {"batch_size": 1}, (120, 120)),  # 38 + 55 + 27
    ("epochized.yaml", {"batch_size": 4, "batch_drop_last": True}, (30, 30)),
    ("blend.yaml", {"batch_size": 3, "virtual_epoch_length": 12}, (12, 12)),
]


@pytest.mark.parametrize(("name", "kwargs", "expected"), CASES)
def test_len_as_energon_counts(two_leaves: Path, name: str, kwargs: dict, expected: tuple) -> None:
    import energon_lite

    assert _lens(energon_lite, two_leaves / name, **kwargs) == expected


def test_len_matches_energon(two_leaves: Path, collector_spared: None) -> None:
    energon = pytest.importorskip("megatron.energon")
    for name, kwargs, expected in CASES:
        assert _lens(energon, two_leaves / name, **kwargs) == expected, (name, kwargs)


@pytest.mark.parametrize(
    ("world", "workers", "ds1", "ds2"),
    [
        (1, 0, [38], [55 + 27]),  # one worker: 0.7 x 55 -> 38, 0.5 x 55 -> 27
        (1, 2, [19 + 18], [55 + 14 + 13]),  # 28 + 27 samples: each worker rounds down
        (2, 2, [9 + 9, 9 + 9], [21 + 19, 21 + 21]),  # Energon's 58 and 60
    ],
)
def test_epochized_len_is_the_epoch_delivered(
    two_leaves: Path, world: int, workers: int, ds1: list[int], ds2: list[int]
) -> None:
    """Fractions round down per worker, as Energon's ``RepeatDataset`` does (``floor(f * n)``
    of a worker's ``n`` samples), and each rank's len() is exactly what it delivers."""
    for rank in range(world):
        dataset = get_train_dataset(
            two_leaves / "epochized.yaml",
            worker_config=WorkerConfig(rank=rank, world_size=world, num_workers=workers),
            batch_size=1,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            repeat=False,
        )
        batches = list(get_loader(dataset))
        assert len(batches) == len(dataset) == ds1[rank] + ds2[rank]
        keys = [key for batch in batches for key in batch.__key__]
        assert sum(k.startswith("ds1") for k in keys) == ds1[rank]
        assert sum(k.startswith("ds2") for k in keys) == ds2[rank]


PER_RANK = [  # (ranks, workers per rank, dataset, batch size, val)
    (2, 2, "blend.yaml", 3, False),
    (2, 2, "ds1", 11, True),  # Energon's 25 val samples per rank
    (1, 4, "ds1", 11, True),  # Energon's 8 val batches of 4 workers
    (3, 5, "blend.yaml", 1, False),
    (3, 5, "ds1", 2, False),
    (32, 1, "blend.yaml", 1, False),  # fewer samples than workers in the second ... 32nd
    (2, 2, "epochized.yaml", 1, False),  # fractions rounded down per worker: 58 and 60
    (3, 5, "epochized.yaml", 2, False),
]


@pytest.mark.parametrize(("world", "workers", "name", "batch_size", "val"), PER_RANK)
def test_len_per_rank_matches_energon(
    two_leaves: Path,
    world: int,
    workers: int,
    name: str,
    batch_size: int,
    val: bool,
    collector_spared: None,
) -> None:
    """Each rank's len() equals Energon's on every rank: both deal each global worker a
    contiguous range of every dataset's samples (the next dataset's extra samples rotated
    to the workers after the previous one's), train and val, one dataset and a blend."""
    import energon_lite

    energon = pytest.importorskip("megatron.energon")

    def lens(lib: object, rank: int) -> tuple[int, int]:
        config = lib.WorkerConfig(rank=rank, world_size=world, num_workers=workers)  # type: ignore[attr-defined]
        if val:
            dataset = lib.get_val_dataset(  # type: ignore[attr-defined]
                two_leaves / name, split_part="train", batch_size=batch_size, worker_config=config
            )
            return len(dataset), len(lib.get_loader(dataset))  # type: ignore[attr-defined]
        return _lens(lib, two_leaves / name, batch_size=batch_size, worker_config=config)

    for rank in range(world):
        assert lens(energon_lite, rank) == lens(energon, rank), rank
