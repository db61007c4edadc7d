"""The loader as torch's ``Stateful`` (energon_lite/loader/stateful.py): the form, its round
trips through ``torch.save`` and DCP, and the step.

The trainers' own runs (Lightning, Accelerate, torchtitan, a Megatron/NeMo loop, DCP over
2 processes restored on 2 and on 1, batches through Lightning's and Accelerate's device
transfer) are the recipes of docs/integrations.md, which tests/test_docs.py runs.
"""

from __future__ import annotations

import io
import logging
from collections import Counter
from pathlib import Path

import pytest
import torch

from energon_lite import StateError, WorkerConfig, get_loader, get_savable_loader, get_train_dataset
from energon_lite.loader.stateful import KEYS
from energon_lite.testing import take


def _loader(root: Path, rank: int = 0, world: int = 1, workers: int = 0, **options):
    make = options.pop("make", get_savable_loader)
    return make(
        get_train_dataset(
            root,
            worker_config=WorkerConfig(rank=rank, world_size=world, num_workers=workers),
            batch_size=4,
            shuffle_buffer_size=8,
            max_samples_per_sequence=5,
            **options,
        )
    )


def _keys(loader, n: int) -> list[list[str]]:
    return [list(batch.__key__) for batch in take(loader, n)]


def _weights_only(value):
    buffer = io.BytesIO()
    torch.save(value, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_state_dict_round_trips_weights_only_with_workers(train_ds: Path) -> None:
    from torch.distributed.checkpoint.stateful import Stateful

    loader = _loader(train_ds, workers=2)
    assert isinstance(loader, Stateful)
    take(loader, 5)
    state = _weights_only(loader.state_dict())
    assert loader.step == state["step"] == 5
    expected = _keys(loader, 4)
    loader.close()

    restored = _loader(train_ds, workers=2)
    restored.load_state_dict(state)
    assert restored.step == 5
    assert _keys(restored, 4) == expected
    assert restored.step == 9  # the step carries on from the saved one
    restored.close()


def test_dcp_keys_do_not_depend_on_progress_or_layout(train_ds: Path) -> None:
    """DCP loads only the keys a fresh loader's state_dict() has: they must be the same for
    a fresh loader, one part-way through, and a loader of another layout."""
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict

    fresh = _loader(train_ds, 0, 1, 0)
    moved = _loader(train_ds, 1, 2, 2)
    take(moved, 3)
    keys = [set(flatten_state_dict(one.state_dict())[0]) for one in (fresh, moved)]
    moved.close()
    assert keys[0] == keys[1] == set(KEYS)


# torch warns at every save and load without a process group, also with no_dist=True
@pytest.mark.filterwarnings(
    "ignore:torch.distributed is disabled, unavailable or uninit:UserWarning"
)
def test_dcp_in_one_process_restores_exactly(train_ds: Path, tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    loader = _loader(train_ds, workers=1)
    take(loader, 4)
    dcp.save({"dataloader": loader}, checkpoint_id=tmp_path / "ckpt", no_dist=True)
    expected = _keys(loader, 3)
    loader.close()
    restored = _loader(train_ds, workers=1)
    dcp.load({"dataloader": restored}, checkpoint_id=tmp_path / "ckpt", no_dist=True)
    assert _keys(restored, 3) == expected
    assert restored.step == 7
    restored.close()


def test_a_rank_state_saved_without_a_process_group_restores_on_its_rank(train_ds: Path) -> None:
    """Without torch.distributed the form holds this rank's state only: it restores on the
    same rank (restore_state_rank), and another rank refuses it by name."""
    loader = _loader(train_ds, 1, 2)
    take(loader, 2)
    state = loader.state_dict()
    assert state["world_size"] == 2 and len(state["rank_states"]) == 1
    expected = _keys(loader, 2)
    same = _loader(train_ds, 1, 2)
    same.load_state_dict(state)
    assert _keys(same, 2) == expected
    with pytest.raises(StateError, match="rank"):
        _loader(train_ds, 0, 2).load_state_dict(state)


def test_elastic_load_of_a_gathered_form(train_ds: Path) -> None:
    """A form with every old rank's state (as state_dict() gathers it) restores on another
    number of ranks: the rest of the epoch exactly once."""
    from energon_lite.loader.stateful import stateful_form
    from energon_lite.state.codec import encode_state

    delivered, encoded = [], []
    for rank in range(2):
        old = _loader(train_ds, rank, 2, repeat=False)
        delivered += [key for batch in take(old, 3) for key in batch.__key__]
        encoded.append(encode_state(old.save_state_rank()))
    form = _weights_only(stateful_form(encoded, [3, 3], 2))
    for rank in range(3):
        new = _loader(train_ds, rank, 3, repeat=False)
        new.load_state_dict(form)
        assert new.step == 3
        delivered += [key for batch in new for key in batch.__key__]
    assert Counter(delivered) == Counter(f"{i:06d}" for i in range(120))


def test_get_loader_saves_no_state_and_says_so_at_load(
    train_ds: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plain = _loader(train_ds, make=get_loader)
    take(plain, 2)
    state = plain.state_dict()
    assert state["rank_states"] == [] and state["step"] == 2
    fresh_keys = _keys(_loader(train_ds), 2)
    restored = _loader(train_ds)
    take(restored, 1)
    with caplog.at_level(logging.WARNING, logger="energon_lite"):
        restored.load_state_dict(state)
    assert "starts from the beginning" in caplog.text
    assert _keys(restored, 2) == fresh_keys


def test_bad_forms_are_refused_naming_what_is_wrong(train_ds: Path) -> None:
    loader = _loader(train_ds)
    with pytest.raises(StateError, match="restore_state_rank"):
        loader.load_state_dict(loader.save_state_rank())  # a rank state, not a state_dict
    cut = {k: v for k, v in loader.state_dict().items() if k != "rank_states"}
    with pytest.raises(StateError, match="lacks rank_states"):
        loader.load_state_dict(cut)
    with pytest.raises(StateError, match="step=-1"):
        loader.load_state_dict({**loader.state_dict(), "step": -1})
    with pytest.raises(StateError, match="corrupt or truncated"):
        loader.load_state_dict({**loader.state_dict(), "rank_states": [b"\xc1"]})
