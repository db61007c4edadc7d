"""``energon-lite checkpoint info/redist`` on DCP folders (energon_lite/cli/checkpoint_dcp.py):
only the loader's keys are read, as plain data; redist writes a DCP folder that the new
layout's loaders load with ``dcp.load``."""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch
from conftest import make_dataset, run_cli

from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset
from energon_lite.loader.stateful import stateful_form
from energon_lite.state.codec import encode_state
from energon_lite.testing import take


def _loader(root: Path, rank: int, world: int):
    return get_savable_loader(
        get_train_dataset(
            root,
            worker_config=WorkerConfig(rank=rank, world_size=world, num_workers=0),
            batch_size=4,
            shuffle_buffer_size=8,
            max_samples_per_sequence=5,
            repeat=False,
        )
    )


def _dcp_save(value: dict, folder: Path) -> None:
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():  # "assuming ... a single process"
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(value, checkpoint_id=folder, no_dist=True)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    """A dataset, and a DCP folder as 2 ranks save it (the loader's state_dict gathers both
    ranks' states) with a model beside it; the keys the 2 ranks delivered."""
    tmp = tmp_path_factory.mktemp("dcp")
    root = make_dataset(tmp / "ds")
    delivered, encoded = [], []
    for rank in range(2):
        loader = _loader(root, rank, 2)
        delivered += [key for batch in take(loader, 3) for key in batch.__key__]
        encoded.append(encode_state(loader.save_state_rank()))
    form = stateful_form(encoded, [3, 3], 2)
    _dcp_save({"dataloader": form, "model": {"w": torch.ones(4)}}, tmp / "ckpt")
    return root, tmp / "ckpt", delivered


def test_info_shows_the_step_the_datasets_and_the_ranks(saved) -> None:
    root, folder, _ = saved
    done = run_cli("checkpoint", "info", str(folder))
    assert done.returncode == 0, done.stderr
    assert "2 rank(s) at key dataloader" in done.stdout
    assert "step: 3 (batches delivered per rank)" in done.stdout
    assert f"datasets: {root} (split train)" in done.stdout
    assert "layout: 2 ranks x 0 workers" in done.stdout


def test_redist_writes_a_dcp_folder_the_new_layout_loads(saved, tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    root, folder, delivered = saved
    out = tmp_path / "three"
    args = ["redist", str(folder), "--world-size", "3", "--num-workers", "0", "-o", str(out)]
    done = run_cli("checkpoint", *args)
    assert done.returncode == 0, done.stderr
    assert "3 rank(s) at key dataloader" in run_cli("checkpoint", "info", str(out)).stdout
    rest = list(delivered)
    for rank in range(3):
        loader = _loader(root, rank, 3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            dcp.load({"dataloader": loader}, checkpoint_id=out, no_dist=True)
        assert loader.step == 3
        rest += [key for batch in loader for key in batch.__key__]
    assert Counter(rest) == Counter(f"{i:06d}" for i in range(120))


def test_a_dcp_folder_without_a_loader_names_its_keys(tmp_path: Path) -> None:
    _dcp_save({"model": {"w": torch.ones(2)}, "step": 4}, tmp_path / "ckpt")
    done = run_cli("checkpoint", "info", str(tmp_path / "ckpt"))
    assert done.returncode == 1
    assert "without a loader state_dict (its top-level keys: model, step)" in done.stderr


class NotPlainData:
    """An object a crafted checkpoint might hold where the loader's values belong."""


def test_values_that_are_not_plain_data_are_refused(saved, tmp_path: Path) -> None:
    form = stateful_form([b""], [0], 1)
    _dcp_save({"dataloader": {**form, "rank_states": NotPlainData()}}, tmp_path / "ckpt")
    done = run_cli("checkpoint", "info", str(tmp_path / "ckpt"))
    assert done.returncode == 1
    assert "dataloader.rank_states is not plain data (torch.load(weights_only=True)" in done.stderr
