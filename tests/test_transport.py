"""A worker's item pickled once in the worker: what torch's queue sends unpickles to the item."""

from __future__ import annotations

import itertools
import pickle
import threading
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from energon_lite import TaskEncoder, WorkerConfig, get_loader, get_train_dataset
from energon_lite.errors import ConfigError
from energon_lite.loader.transport import PickledItem, pickled_item


def test_an_item_unpickles_whole_with_its_tensors_sharing_one_storage() -> None:
    image = torch.arange(12.0).view(3, 4)
    batch = {"__key__": ["a", "b", "c"], "image": image}
    item = (1, batch, b"state", [image.untyped_storage()])
    sent = pickled_item(item, batch, 1)
    assert isinstance(sent, PickledItem) and isinstance(sent.data, bytes)
    # torch's queue pickles what the worker yields; the trainer unpickles it
    logical, got, state, held = pickle.loads(ForkingPickler.dumps(sent))
    assert (logical, state, got["__key__"]) == (1, b"state", ["a", "b", "c"])
    assert torch.equal(got["image"], image)
    # one pickle: the batch's tensor and the held entry name one storage object (what the
    # trainer's batch memory pool checks before it reuses segments)
    assert got["image"].untyped_storage() is held[0]


def test_an_unpicklable_batch_is_a_config_error_naming_its_keys() -> None:
    batch = {"__key__": ["k1", "k2"], "lock": threading.Lock()}
    with pytest.raises(ConfigError, match=r"worker 3: a batch of type builtins.dict .*'k1', 'k2'"):
        pickled_item((3, batch, None), batch, 3)


class Keys(TaskEncoder):
    """Batches of keys, collated by a plain DataLoader's own ``collate_fn`` below."""

    def encode_batch(self, batch: Any) -> Any:
        return {"keys": list(batch.__key__)}


def _dataset(train_ds: Path, task_encoder: TaskEncoder) -> Any:
    return get_train_dataset(
        train_ds,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=2),
        batch_size=4,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=task_encoder,
    )


@pytest.mark.timeout(600)  # a hang guard only: two worker pools on a loaded machine
def test_a_plain_dataloaders_workers_hand_their_collate_fn_the_batches(train_ds: Path) -> None:
    """Iterated by torch's own DataLoader, the dataset yields batches as they are (its
    collate_fn gets them), the same batches the loader gives."""
    plain = DataLoader(_dataset(train_ds, Keys()), batch_size=None, num_workers=2,
                       collate_fn=_keys_of_a_dict)  # fmt: skip
    got = list(itertools.islice(plain, 6))
    ours = [batch["keys"] for batch in itertools.islice(get_loader(_dataset(train_ds, Keys())), 6)]
    assert got == ours and all(len(keys) == 4 for keys in got)


def _keys_of_a_dict(batch: Any) -> Any:
    """A plain DataLoader's collate_fn (in its workers): the batch itself, a dict."""
    if not isinstance(batch, dict):
        raise TypeError(f"collate_fn got a {type(batch).__name__}, not the batch")
    return batch["keys"]
