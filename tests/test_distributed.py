"""Two real torch.distributed (gloo) ranks: disjoint coverage, global save and restore."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset
from energon_lite.testing import take


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _make_loader(path: str, repeat: bool):
    wc = WorkerConfig.default_worker_config(num_workers=2)
    dataset = get_train_dataset(
        path,
        worker_config=wc,
        batch_size=5,
        shuffle_buffer_size=10,
        max_samples_per_sequence=10,
        repeat=repeat,
    )
    return get_savable_loader(dataset)


def _rank_main(rank: int, path: str, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        epoch = [k for batch in _make_loader(path, repeat=False) for k in batch.__key__]
        loader = _make_loader(path, repeat=True)
        take(loader, 4)
        states = loader.save_state_global(global_dst_rank=0)
        after = [b.__key__ for b in take(loader, 6)]
        # rank 0 holds every state; it hands them out with a scatter
        scattered = _make_loader(path, repeat=True)
        scattered.restore_state_global(states, src_rank=0)
        # or every rank passes the full list (as when all ranks read one checkpoint file)
        box = [states]
        dist.broadcast_object_list(box, src=0)
        listed = _make_loader(path, repeat=True)
        listed.restore_state_global(box[0])
        result = {
            "epoch": epoch,
            "after": after,
            "scattered": [b.__key__ for b in take(scattered, 6)],
            "listed": [b.__key__ for b in take(listed, 6)],
            "states_on_rank": None if states is None else len(states),
        }
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(600)  # a hang guard only (a loaded machine is slow)
def test_two_ranks_cover_disjointly_and_resume_globally(train_ds: Path, tmp_path: Path) -> None:
    mp.start_processes(
        _rank_main, args=(str(train_ds), _free_port(), str(tmp_path)), nprocs=2, start_method="fork"
    )
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    first, second = set(ranks[0]["epoch"]), set(ranks[1]["epoch"])
    assert not first & second
    assert first | second == {f"{i:06d}" for i in range(120)}
    assert len(ranks[0]["epoch"]) + len(ranks[1]["epoch"]) == 120
    assert ranks[0]["states_on_rank"] == 2 and ranks[1]["states_on_rank"] is None
    for rank in ranks:
        assert rank["scattered"] == rank["after"]
        assert rank["listed"] == rank["after"]
    assert ranks[0]["after"] != ranks[1]["after"]
