"""Worker processes started by ``spawn`` (macOS's default) give the stream and the resume
that ``fork`` (Linux's default) gives: README's platform section rests on this."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import make_dataset

SCRIPT = textwrap.dedent(
    """
    import itertools, json, multiprocessing, sys
    from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset

    def run(state=None):
        loader = get_savable_loader(get_train_dataset(
            sys.argv[2], worker_config=WorkerConfig.default_worker_config(num_workers=2),
            batch_size=4, shuffle_buffer_size=10, max_samples_per_sequence=10))
        if state is not None:
            loader.restore_state_rank(state)
        keys = [list(b.__key__) for b in itertools.islice(loader, 4)]
        return keys, loader.save_state_rank()

    if __name__ == "__main__":
        streams = {}
        for method in sys.argv[1].split(","):
            multiprocessing.set_start_method(method, force=True)
            first, state = run()
            rest, _ = run(state)
            streams[method] = first + rest
        print(json.dumps(streams))
    """
)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("start") / "ds", 80, 20)


def _keys(methods: str, dataset: Path, tmp_path: Path) -> dict[str, list[list[str]]]:
    """Each start method's stream and resumed stream, in one interpreter (one torch import):
    the workers of each method start as that method starts them."""
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), methods, str(dataset)],
        capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.timeout(600)  # an interpreter starting four spawned workers that import torch
def test_spawned_workers_give_forks_stream_and_resume(dataset: Path, tmp_path: Path) -> None:
    streams = _keys("fork,spawn", dataset, tmp_path)
    assert len(streams["fork"]) == 8  # 4 batches, then 4 after the restore
    assert streams["spawn"] == streams["fork"]
