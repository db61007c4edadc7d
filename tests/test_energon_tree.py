"""Energon's tree of wrapper datasets as a view of a pipeline (``energon_lite.loader.energon_tree``):
``dataset.dataset...`` reaches a ``BlendDataset`` with ``dataset_weights``, a leaf's
``workers_slice_offsets`` are the samples each worker reads, and ``loader.config()`` equals the
config Energon's loader gives for the same arguments (megatron.energon as the oracle)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import write_text_leaves

import energon_lite as el

MDS = """__module__: megatron.energon
__class__: MetadatasetV2
splits:
  train:
    blend:
      - weight: 1
        path: ds1
        subflavors:
          source: ds1
        shuffle_over_epochs_multiplier: 3
      - weight: 3
        path: ds2
  val:
    blend:
      - weight: 1
        path: ds1
        split_part: train
      - weight: 1
        path: ds2
        split_part: train
"""
EPOCHIZED = """__module__: megatron.energon
__class__: MetadatasetV2
splits:
  train:
    blend_epochized:
      - repetitions: 0.5
        path: ds1
      - repetitions: 2
        path: ds2
"""


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ds1: 55 text samples in shards of 10, ds2: 37; both metadatasets over them."""
    root = tmp_path_factory.mktemp("energon_tree")
    write_text_leaves(root, {"ds1": 55, "ds2": 37}, 10, 4)
    (root / "mds.yaml").write_text(MDS)
    (root / "epochized.yaml").write_text(EPOCHIZED)
    return root


def _blend(dataset: Any) -> Any:
    """Energon's tests' walk: ``.dataset`` down to the BlendDataset."""
    while not isinstance(dataset, el.BlendDataset):
        dataset = dataset.dataset
    return dataset


def _encoder(lib: Any) -> Any:
    """A task encoder with the same hooks (and qualified names) for either library."""

    class Grouped(lib.DefaultTaskEncoder):
        def encode_sample(self, sample: Any) -> Any:
            return sample

        def batch_group_criterion(self, sample: Any) -> tuple[Any, int]:
            return len(sample.text) % 2, 4

    return Grouped()


CASES: list[tuple[str, str, dict[str, Any]]] = [
    # Energon's own test_save_restore_state_train: blend, batches, its slice offsets
    ("train", "mds.yaml", {"batch_size": 10, "parallel_shard_iters": 2, "shuffle_buffer_size": None,
                           "max_samples_per_sequence": None, "shuffle_over_epochs_multiplier": 2}),
    ("train", "mds.yaml", {"batch_size": 3, "shuffle_buffer_size": 20, "max_samples_per_sequence": None,
                           "parallel_shard_iters": 1, "virtual_epoch_length": 7}),
    ("train", "epochized.yaml", {"batch_size": 1, "shuffle_buffer_size": None, "repeat": False,
                                 "parallel_shard_iters": 3, "max_samples_per_sequence": None}),
    ("train", "ds1", {"batch_size": 5, "shuffle_buffer_size": 8, "parallel_shard_iters": 2,
                      "max_samples_per_sequence": None, "encoder": True}),
    ("val", "mds.yaml", {"batch_size": 4, "limit": 5}),
]  # fmt: skip


def _loader(lib: Any, root: Path, kind: str, path: str, kwargs: dict[str, Any], wc: Any) -> Any:
    kwargs = dict(kwargs)
    if kwargs.pop("encoder", False):
        kwargs["task_encoder"] = _encoder(lib)
    if kind == "val":
        dataset = lib.get_val_dataset(root / path, worker_config=wc, **kwargs)
    else:
        dataset = lib.get_train_dataset(root / path, worker_config=wc, **kwargs)
    return lib.get_savable_loader(dataset)


@pytest.mark.parametrize(("kind", "path", "kwargs"), CASES)
@pytest.mark.parametrize(("rank", "world", "workers"), [(0, 1, 0), (1, 2, 3)])
def test_config_is_energons(
    root: Path, kind: str, path: str, kwargs: dict, rank: int, world: int, workers: int
) -> None:
    """The same arguments give the config Energon's loader gives, tree, names and offsets."""
    energon = pytest.importorskip("megatron.energon")
    ours = _loader(el, root, kind, path, kwargs, el.WorkerConfig(rank, world, workers))
    theirs = _loader(
        energon, root, kind, path, kwargs, energon.WorkerConfig(rank=rank, world_size=world,
                                                                num_workers=workers)
    )  # fmt: skip
    assert ours.config() == theirs.config()


def _unshuffled(root: Path, rank: int, world_size: int, num_workers: int) -> Any:
    """mds.yaml's train split for one rank, batches of 1, no shuffling."""
    return el.get_train_dataset(
        root / "mds.yaml",
        worker_config=el.WorkerConfig(rank=rank, world_size=world_size, num_workers=num_workers),
        batch_size=1,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
    )


def test_the_tree_leads_to_the_blend_and_its_slice_offsets(root: Path) -> None:
    """Energon's tests walk ``.dataset`` to the blend; each leaf's ``workers_slice_offsets``
    are the samples each worker of the rank reads, and over all ranks every sample once."""
    per_global_worker: Counter = Counter()
    for rank in range(2):
        dataset = _unshuffled(root, rank, world_size=2, num_workers=3)
        blend = _blend(dataset)
        assert [weight for _, weight in blend.dataset_weights] == [0.25, 0.75]
        for (node, _), total in zip(blend.dataset_weights, (55, 37)):
            leaf = node.dataset.dataset
            offsets = leaf.workers_slice_offsets
            assert len(offsets) == 3 and len(leaf) == sum(o[-1] - o[0] for o in offsets)
            assert all(o == sorted(o) and o[-1] <= total for o in offsets)
            for worker, o in enumerate(offsets):
                per_global_worker[(rank, worker)] += o[-1] - o[0]
        assert len(dataset) == sum(per_global_worker[(rank, w)] for w in range(3))
    assert sum(per_global_worker.values()) == 55 + 37
    assert max(per_global_worker.values()) - min(per_global_worker.values()) <= 1


def test_a_worker_without_samples_has_one_offset(root: Path) -> None:
    """With more global workers than a leaf's samples (ds2: 37 of 48), a worker without any
    of them has the offsets ``[start]`` and its rank's leaf ``len()`` 0, as in Energon."""
    empty = []
    for rank in range(48):
        dataset = _unshuffled(root, rank, world_size=48, num_workers=1)
        leaf = _blend(dataset).dataset_weights[1][0].dataset.dataset
        (offsets,) = leaf.workers_slice_offsets
        assert len(offsets) in (1, 2) and len(leaf) == len(offsets) - 1
        if len(offsets) == 1:
            empty.append(rank)
    assert len(empty) == 48 - 37


def test_saved_states_still_match_our_own_config(root: Path) -> None:
    """``loader.config()`` is Energon's tree; a state still records and checks energon_lite's
    own ``dataset.config()``, so states saved before restore as they did."""
    kind, path, kwargs = CASES[0]
    wc = el.WorkerConfig(0, 1, 0)
    loader = _loader(el, root, kind, path, kwargs, wc)
    next(iter(loader))
    state = loader.save_state_rank()
    assert state["config"] == loader.dataset.config() != loader.config()["dataset"]
    again = _loader(el, root, kind, path, kwargs, wc)
    again.restore_state_rank(state)
    assert next(iter(again)).__key__ == next(iter(loader)).__key__
