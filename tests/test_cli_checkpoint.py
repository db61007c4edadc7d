"""`energon-lite checkpoint info/redist` on what trainers really save (issue 26 item 5): the
loader states nested in a torch.save'd dict (a list of ranks, a dict of ranks, Megatron's
key), `--key`, a file without a state, and `info | head`. Real processes, real states."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import run_cli

from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset
from energon_lite.testing import take


def _cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args)


def _loader(root: Path, rank: int, world: int):
    return get_savable_loader(
        get_train_dataset(
            root,
            worker_config=WorkerConfig(rank=rank, world_size=world, num_workers=0),
            batch_size=4,
            shuffle_buffer_size=8,
            max_samples_per_sequence=5,
        )
    )


@pytest.fixture(scope="module")
def rank_states(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    from conftest import make_dataset

    root = make_dataset(tmp_path_factory.mktemp("ckpt") / "ds")
    states = []
    for rank in range(2):
        loader = _loader(root, rank, 2)
        take(loader, 3)
        states.append(loader.save_state_rank())
    return root, states


def _trainer_checkpoint(states: list) -> dict:
    return {"step": 7, "model": {"w": torch.zeros(3)}, "optimizer": {"lr": 0.1}, "data": states}


def test_info_finds_the_states_inside_a_trainer_checkpoint(rank_states, tmp_path: Path) -> None:
    _, states = rank_states
    torch.save(_trainer_checkpoint(states), tmp_path / "run.pt")
    done = _cli("checkpoint", "info", str(tmp_path / "run.pt"))
    assert done.returncode == 0, done.stderr
    assert "loader state of 2 rank(s) at key data" in done.stdout
    assert "rank 1:" in done.stdout and "batch_size: 4" in done.stdout
    by_rank = {"step": 7, "loader": {"rank1": states[1], "rank0": states[0]}}
    torch.save(by_rank, tmp_path / "by_rank.pt")
    done = _cli("checkpoint", "info", str(tmp_path / "by_rank.pt"))
    assert done.returncode == 0, done.stderr
    assert "2 rank(s) at key loader" in done.stdout
    assert done.stdout.index("rank 0:") < done.stdout.index("rank 1:")
    # two places: the command asks which; --key picks one
    both = {"a": {"loader": states[0]}, "b": {"loader": states[1]}}
    torch.save(both, tmp_path / "both.pt")
    done = _cli("checkpoint", "info", str(tmp_path / "both.pt"))
    assert done.returncode == 1 and "loader states in 2 places: a.loader" in done.stderr
    assert "pass --key" in done.stderr
    done = _cli("checkpoint", "info", str(tmp_path / "both.pt"), "--key", "b.loader")
    assert done.returncode == 0 and "at key b.loader" in done.stdout
    done = _cli("checkpoint", "info", str(tmp_path / "both.pt"), "--key", "b.nope")
    assert done.returncode == 1 and "--key b.nope: b has no key 'nope'" in done.stderr


def test_a_file_without_a_state_fails_without_asking_for_a_report(tmp_path: Path) -> None:
    torch.save({"step": 7, "model": {"w": torch.zeros(3)}}, tmp_path / "model.pt")
    for args in (("info",), ("redist", "--world-size", "1", "--num-workers", "0", "-o", "o")):
        done = _cli("checkpoint", *args[:1], str(tmp_path / "model.pt"), *args[1:])
        assert done.returncode == 1, done.stdout
        assert "no energon_lite loader state in it" in done.stderr
        assert "top-level keys: ['model', 'step']" in done.stderr
        assert "please report" not in done.stderr and "Traceback" not in done.stderr


def test_redist_of_a_trainer_checkpoint_writes_states_that_restore(
    rank_states, tmp_path: Path
) -> None:
    root, states = rank_states
    torch.save(_trainer_checkpoint(states), tmp_path / "run.pt")
    done = _cli(
        "checkpoint", "redist", str(tmp_path / "run.pt"),
        "--world-size", "1", "--num-workers", "0", "-o", str(tmp_path / "out"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "2 ranks x 0 workers -> 1 ranks x 0 workers" in done.stdout
    assert "found at key data" in done.stdout and "under the same key" in done.stdout
    new = torch.load(tmp_path / "out/run.pt", weights_only=True)
    assert set(new) == {"data"} and len(new["data"]) == 1
    loader = _loader(root, 0, 1)
    loader.restore_state_rank(new["data"][0])
    assert len(take(loader, 3)) == 3
    # Megatron's per-rank files: {"dataloader_state_dict": state}
    for rank, state in enumerate(states):
        folder = tmp_path / "megatron"
        folder.mkdir(exist_ok=True)
        torch.save({"dataloader_state_dict": state, "iteration": 7}, folder / f"rank_{rank}.pt")
    done = _cli(
        "checkpoint", "redist", str(tmp_path / "megatron"),
        "--world-size", "1", "--num-workers", "0", "-o", str(tmp_path / "out2"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert set(torch.load(tmp_path / "out2/rank_0.pt", weights_only=True)) == {
        "dataloader_state_dict"
    }


def test_info_into_a_closed_pipe_exits_quietly(rank_states, tmp_path: Path) -> None:
    _, states = rank_states
    (tmp_path / "many.json").write_text(json.dumps(states * 200))  # far more than a pipe holds
    proc = subprocess.Popen(
        [sys.executable, "-m", "energon_lite.cli", "checkpoint", "info", str(tmp_path / "many.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()  # `| head -1`: one line read, then the reader is gone
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert err == ""


def test_checkpoint_info_writes_a_blends_schedule_in_words() -> None:
    from energon_lite.cli.checkpoint_info import describe_config

    config = {
        "datasets": ["train:aaaa", "train:bbbb"],
        "blend_mode": "weights",
        "weights": [[[[0, 9], [2000, 1]], "linear"], 0.5],
    }
    state = {"paths": ["web (split train)", "code (split train)"], "in_pass": 12, "epoch": 0}
    lines = describe_config(state, config)
    assert lines[:3] == [
        "  datasets:",
        "    'web (split train)' (content 'train:aaaa'), weight schedule ('linear'): 9 at step "
        "0, 1 at step 2000",
        "    'code (split train)' (content 'train:bbbb'), weight 0.5",
    ]
    assert "  blend_mode: 'weights'" in lines and not any("[[" in line for line in lines)
    assert lines[-1] == "  step: 12 batches delivered in pass 0"
