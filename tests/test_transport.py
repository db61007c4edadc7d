"""A worker's item pickled once in the worker: what torch's queue sends unpickles to the item."""

from __future__ import annotations

import pickle
import threading
from multiprocessing.reduction import ForkingPickler

import pytest
import torch

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
