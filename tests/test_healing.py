"""Workers that heal: real worker processes killed with SIGKILL (or stalled) mid-stream; the
loader replaces them from the states of the batches received and the stream is the
uninterrupted one, each sample once. A worker that dies on every start spends the budget."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import make_dataset
from torch.utils.data import get_worker_info

from energon_lite import (
    CaptioningSample,
    Sample,
    TaskEncoder,
    WorkerConfig,
    get_loader,
    get_savable_loader,
    get_train_dataset,
)
from energon_lite.errors import ConfigError, WorkerRestartError, WorkerTimeoutError
from energon_lite.loader.stats_report import format_stats
from energon_lite.task_encoder.packing import best_fit
from energon_lite.testing import take

# a stall is declared after this long: generous, so that a merely slow batch on a loaded
# machine is not taken for one (the held worker waits until killed or released)
STALL_S = 8.0
WAIT_S = 60  # the most a worker waits at its kill point for the test to kill it


def _hold(flag: Path) -> None:
    """Say where we are (our pid in ``flag``) and wait to be killed, or released."""
    part = flag.with_suffix(".part")
    part.write_text(str(os.getpid()))
    part.rename(flag)  # whole, or not there
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and not flag.with_suffix(".release").exists():
        time.sleep(0.01)


class CaptionEncoder(TaskEncoder):
    """Random flips from the per-sample generator (payloads must match pixel for pixel); a
    worker that reaches sample ``key`` while ``flag`` does not exist yet stops there."""

    def __init__(self, flag: Path, key: str = "") -> None:
        super().__init__()
        self.flag, self.key = flag, key

    def encode_sample(self, sample: CaptioningSample) -> CaptioningSample:
        if sample.__key__ == self.key and not self.flag.exists():
            _hold(self.flag)
        if self.sample_rng.random() < 0.5:
            sample.image = sample.image.flip(-1)
        return sample


@dataclass
class Tokens(Sample):
    tokens: torch.Tensor | None = None
    members: list[str] = field(default_factory=list)


class PackingEncoder(TaskEncoder):
    """Captions -> word ids, best-fit packed into 32 tokens; the worker packing a group
    with member ``key`` while ``flag`` does not exist yet stops there."""

    def __init__(self, flag: Path, key: str = "") -> None:
        super().__init__()
        self.flag, self.key = flag, key

    def preencode_sample(self, sample: Any) -> Tokens:
        ids = [sum(map(ord, word)) % 1000 for word in sample.text.split() for _ in range(2)]
        return Tokens.derive_from(sample, tokens=torch.tensor(ids), members=[sample.__key__])

    def select_samples_to_pack(self, samples: list[Tokens]) -> list[list[Tokens]]:
        return best_fit(samples, 32, length=lambda s: len(s.tokens))

    def postencode_sample(self, sample: Tokens) -> Tokens:
        noise = int(self.sample_rng.integers(1000, 2000))
        return Tokens.derive_from(sample, tokens=sample.tokens + noise, members=sample.members)

    def pack_selected_samples(self, samples: list[Tokens]) -> Tokens:
        members = [m for s in samples for m in s.members]
        if self.key in members and not self.flag.exists():
            _hold(self.flag)
        return Tokens.derive_from(
            samples[0], tokens=torch.cat([s.tokens for s in samples]), members=members
        )


def _killer(flag: Path) -> threading.Thread:
    """A thread that SIGKILLs the process whose pid appears in ``flag`` (within 60 s)."""

    def run() -> None:
        deadline = time.monotonic() + 60
        while not flag.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        if flag.exists():
            os.kill(int(flag.read_text()), signal.SIGKILL)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


SETUPS = {
    # no shuffle buffer: the kill falls inside a batch of 8 (its 4th sample)
    "mid_batch": ("train_ds", dict(batch_size=8, shuffle_buffer_size=None), 5, 3),
    # a shuffle buffer of 20 per worker, full long before the kill
    "full_shuffle_buffer": ("train_ds", dict(batch_size=8, shuffle_buffer_size=20), 6, 2),
    # inside pack_selected_samples, with the packing buffer holding samples
    "packing": ("text_ds", dict(batch_size=None, shuffle_buffer_size=16, packing_buffer_size=24), 20, 0),
    # 1.5 MB batches built in the workers' reused shared-memory buffers: the new pool has
    # buffers of its own, and the batches received before the kill stay intact
    "batch_memory": ("big_ds", dict(batch_size=8, shuffle_buffer_size=None), 4, 5),
}  # fmt: skip


@pytest.fixture(scope="module")
def big_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """64 captioned 128x128 images in 8 shards."""
    return make_dataset(
        tmp_path_factory.mktemp("big_ds"), 64, 8, image_size=(128, 128), with_json=False
    )


def _loader(
    path: Path,
    setup: str,
    flag: Path,
    key: str = "",
    encoder: TaskEncoder | None = None,
    **loader_options: Any,
) -> Any:
    options = dict(SETUPS[setup][1])
    packing = setup == "packing"
    if encoder is None:
        encoder = PackingEncoder(flag, key) if packing else CaptionEncoder(flag, key)
    dataset = get_train_dataset(
        path,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=2),
        max_samples_per_sequence=5 if packing else 10,
        task_encoder=encoder,
        repeat=False,
        **options,
    )
    return get_savable_loader(dataset, **loader_options)


def _content(batch: Any) -> tuple:
    if isinstance(batch, Tokens):
        return tuple(batch.members), tuple(batch.tokens.tolist())
    return tuple(batch.__key__), float(batch.image.sum())


@pytest.mark.timeout(600)  # a hang guard only (a loaded machine is slow)
@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_a_killed_worker_is_replaced_and_the_stream_is_unchanged(
    setup: str, request: pytest.FixtureRequest, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="energon_lite")
    path = request.getfixturevalue(SETUPS[setup][0])
    never = tmp_path / "never"
    never.touch()  # the flag exists: nobody stops
    reference = [_content(b) for b in _loader(path, setup, never)]
    batch, position = SETUPS[setup][2:]
    key = reference[batch][0][position]  # a sample key (a pack's member)
    flag = tmp_path / "killed"
    loader = _loader(path, setup, flag, key, stats=True)
    killer = _killer(flag)
    stream = iter(loader)
    batches = take(stream, len(reference) - 3)  # all kept: the lost pool's must stay intact
    assert loader.worker_restarts  # the kill came before this checkpoint
    # what a logger sees: one heal in the window that had it, none in the next
    assert loader.metrics()["loader/heals"] == 1
    assert loader.metrics()["loader/heals"] == 0
    state = loader.save_state_rank()
    batches += list(stream)
    healed = [_content(b) for b in batches]
    killer.join(timeout=5)
    assert flag.exists()  # the worker stopped at the kill point and was killed there
    assert healed == reference  # the same batches in the same order, payloads included
    counts = Counter(m for content in healed for m in content[0])
    assert set(counts.values()) == {1}  # every sample once
    (restart,) = loader.worker_restarts
    assert restart["cause"] == "killed by signal 9 (SIGKILL)"
    assert restart["pid"] == int(flag.read_text())
    assert restart["worker"] in (0, 1) and restart["seconds"] is not None
    if setup == "full_shuffle_buffer":
        assert restart["refetched_samples"] >= 20  # the restored buffer was fetched again
    assert loader.stats()["worker_restarts"] == loader.worker_restarts
    report = "\n".join(format_stats(loader.stats()))
    assert f"worker restart 1: worker {restart['worker']} killed by signal 9 (SIGKILL)" in report
    assert f"restart 1 at {restart['at']}: rank 0 worker {restart['worker']}" in caplog.text
    assert "replacing the worker pool from the states of the batches received" in caplog.text
    # a state saved after the restart resumes exactly, as any state does
    resumed = _loader(path, setup, never)
    resumed.restore_state_rank(state)
    assert [_content(b) for b in resumed] == reference[-3:]


class StopsTwice(CaptionEncoder):
    """A CaptionEncoder that stops at two samples, each the first time (its own flag)."""

    def __init__(self, stops: list[tuple[Path, str]]) -> None:
        super().__init__(stops[0][0])
        self.stops = stops

    def encode_sample(self, sample: CaptioningSample) -> CaptioningSample:
        for flag, key in self.stops:
            if sample.__key__ == key and not flag.exists():
                _hold(flag)
        return super().encode_sample(sample)


@pytest.mark.timeout(600)  # a hang guard only: subprocesses and pools on a loaded machine
def test_two_kills_in_one_epoch_are_two_restarts(train_ds: Path, tmp_path: Path) -> None:
    never = tmp_path / "never"
    never.touch()
    reference = [_content(b) for b in _loader(train_ds, "full_shuffle_buffer", never)]
    stops = [(tmp_path / "first", reference[3][0][1]), (tmp_path / "second", reference[9][0][6])]
    loader = _loader(train_ds, "full_shuffle_buffer", never, encoder=StopsTwice(stops))
    killers = [_killer(flag) for flag, _ in stops]
    healed = [_content(b) for b in loader]
    for killer in killers:
        killer.join(timeout=5)
    assert healed == reference
    restarts = loader.worker_restarts
    assert [r["pid"] for r in restarts] == [int(flag.read_text()) for flag, _ in stops]
    assert {r["cause"] for r in restarts} == {"killed by signal 9 (SIGKILL)"}


class DiesOnStart(TaskEncoder):
    """torch's worker 0 kills itself on its first sample, in every pool."""

    def encode_sample(self, sample: CaptioningSample) -> CaptioningSample:
        info = get_worker_info()
        if info is not None and info.id == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        return sample


def _dying(path: Path, **loader_options: Any) -> Any:
    dataset = get_train_dataset(
        path,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=2),
        batch_size=4,
        shuffle_buffer_size=None,
        max_samples_per_sequence=10,
        task_encoder=DiesOnStart(),
    )
    return get_savable_loader(dataset, **loader_options)


@pytest.mark.timeout(600)  # a hang guard only: subprocesses and pools on a loaded machine
def test_a_worker_that_dies_on_every_start_stops_the_run_after_the_budget(train_ds: Path) -> None:
    loader = _dying(train_ds, max_worker_restarts=2, worker_restart_window_seconds=600)
    with pytest.raises(WorkerRestartError) as caught:
        for _ in loader:
            pass
    message = str(caught.value)
    assert "killed by signal 9 (SIGKILL); the loader does not replace it" in message
    assert "more than max_worker_restarts=2 within worker_restart_window_seconds=600" in message
    assert "\n  restart 1 at " in message and "\n  restart 2 at " in message
    assert "restart 3" not in message
    assert [r["number"] for r in loader.worker_restarts] == [1, 2]
    # each replacement pool was lost before its first batch: timed to that loss, not null
    assert all(isinstance(r["seconds"], float) for r in loader.worker_restarts)
    # 0: today's behaviour, the first death ends the run
    with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid"):
        for _ in _dying(train_ds, max_worker_restarts=0):
            pass


@pytest.mark.timeout(600)  # a hang guard only (a loaded machine is slow)
def test_a_stalled_worker_is_replaced_when_fail_on_timeout_asks(
    train_ds: Path, tmp_path: Path
) -> None:
    never = tmp_path / "never"
    never.touch()
    reference = [_content(b) for b in _loader(train_ds, "full_shuffle_buffer", never)]
    key = reference[4][0][2]
    flag = tmp_path / "stalled"
    loader = _loader(
        train_ds,
        "full_shuffle_buffer",
        flag,
        key,
        fail_on_timeout="restart",
        watchdog_timeout_seconds=STALL_S,
    )
    healed = [_content(b) for b in loader]
    assert flag.exists()
    assert healed == reference
    (restart,) = loader.worker_restarts
    assert restart["cause"].startswith("stalled: no batch for ")
    assert restart["pid"] == int(flag.read_text())
    assert "in _hold" in restart["stack"] and "in encode_sample" in restart["stack"]
    assert "_worker_loop" in restart["stack"] and "watchdog" not in restart["stack"]
    # fail_on_timeout=True still raises (healing on: the loader waits in slices)
    flag.unlink()
    raising = _loader(
        train_ds,
        "full_shuffle_buffer",
        flag,
        key,
        fail_on_timeout=True,
        watchdog_timeout_seconds=STALL_S,
    )
    try:
        with pytest.raises(WorkerTimeoutError, match=r"rank 0: worker [01] .* timed out"):
            for _ in raising:
                pass
    finally:
        flag.with_suffix(".release").touch()  # the stalled worker may go: a quick shutdown
        raising.close()
    assert raising.worker_restarts == []


def test_healing_arguments_are_checked(train_ds: Path, tmp_path: Path) -> None:
    flag = tmp_path / "never"
    with pytest.raises(ConfigError, match=r"max_worker_restarts=-1 must be an integer >= 0"):
        _loader(train_ds, "mid_batch", flag, max_worker_restarts=-1)
    with pytest.raises(ConfigError, match=r"worker_restart_window_seconds=0 must be > 0"):
        _loader(train_ds, "mid_batch", flag, worker_restart_window_seconds=0)
    with pytest.raises(ConfigError, match=r"on_timeout='retry': use 'raise' or 'restart'"):
        _loader(train_ds, "mid_batch", flag, on_timeout="retry")
    with pytest.raises(ConfigError, match=r"on_timeout='restart' needs timeout_seconds"):
        _loader(train_ds, "mid_batch", flag, on_timeout="restart")
    with pytest.raises(ConfigError, match=r"fail_on_timeout='yes': use True"):
        _loader(train_ds, "mid_batch", flag, fail_on_timeout="yes")
    dataset = _loader(train_ds, "mid_batch", flag).dataset
    with pytest.raises(ConfigError, match=r"get_loader\(max_worker_restarts=2\): a loader without"):
        get_loader(dataset, max_worker_restarts=2)
    assert get_loader(dataset).worker_restarts == []  # a stateless loader does not heal


class KillsAtRegistration:
    """A profile function of the trainer's main thread: when torch has just registered a new
    pool's workers with its ``SIGCHLD`` handler (inside ``iter()``, while the pool starts),
    it SIGKILLs one of them and waits until it is dead, ``times`` times (pool start-ups).
    The kernel's ``SIGCHLD`` for the death is raised in this thread, so that its handler
    runs here, inside the pool's start-up, whichever thread the kernel woke."""

    def __init__(self, times: int) -> None:
        self.times, self.killed, self.seen = times, list[int](), set[int]()

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event != "c_return" or getattr(arg, "__name__", "") != "_set_worker_pids":
            return
        new = sorted(p.pid for p in multiprocessing.active_children() if p.pid not in self.seen)
        self.seen.update(new)
        if len(self.killed) < self.times and new:
            os.kill(new[-1], signal.SIGKILL)
            os.waitid(os.P_PID, new[-1], os.WEXITED | os.WNOWAIT)  # dead, not reaped
            self.killed.append(new[-1])
            signal.raise_signal(signal.SIGCHLD)


@pytest.mark.timeout(600)  # a hang guard only: subprocesses and pools on a loaded machine
def test_a_worker_killed_while_its_pool_starts_is_replaced(train_ds: Path, tmp_path: Path) -> None:
    """The first pool and the replacement pool each lose a worker while torch starts them
    (torch's SIGCHLD handler would raise in the trainer then): both are healed."""
    never = tmp_path / "never"
    never.touch()
    reference = [_content(b) for b in _loader(train_ds, "full_shuffle_buffer", never)]
    loader = _loader(train_ds, "full_shuffle_buffer", never)
    killer = KillsAtRegistration(times=2)
    sys.setprofile(killer)
    try:
        healed = [_content(b) for b in loader]
    finally:
        sys.setprofile(None)
    assert len(killer.killed) == 2  # in the first pool's start-up and its replacement's
    assert healed == reference
    assert [r["pid"] for r in loader.worker_restarts] == killer.killed
    assert {r["cause"] for r in loader.worker_restarts} == {"killed by signal 9 (SIGKILL)"}


TRAINER = """
import sys
from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset

dataset = get_train_dataset(
    sys.argv[1],
    worker_config=WorkerConfig(rank=0, world_size=1, num_workers=2),
    batch_size=4,
    shuffle_buffer_size=None,
    max_samples_per_sequence=10,
)
batches = iter(get_savable_loader(dataset, watchdog_timeout_seconds=600))
next(batches)
print("received", flush=True)
sys.stdin.read()  # until killed
"""


@pytest.mark.timeout(600)  # a hang guard only: subprocesses and pools on a loaded machine
def test_a_killed_trainer_leaves_nothing_in_the_temp_directory(train_ds: Path) -> None:
    """The workers' stack files (for a stall's or a late batch's stack) go with the
    processes: a trainer killed with SIGKILL leaves no folder of ours behind."""
    # a temp folder of its own with a short path: under pytest-xdist's tmp_path
    # (/tmp/pytest-of-<user>/pytest-<n>/popen-gw<k>/<test>/) the workers' socket for sending
    # tensors would pass the 107 bytes a Unix socket path may have (test_loader's
    # test_a_temp_folder_too_long_for_a_socket_raises_instead_of_hanging)
    with tempfile.TemporaryDirectory(prefix="killed-") as folder:
        temp = Path(folder)
        root = Path(__file__).resolve().parent.parent
        env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(root)}
        trainer = subprocess.Popen(
            [sys.executable, "-c", TRAINER, str(train_ds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        try:
            assert trainer.stdout is not None
            line = trainer.stdout.readline()
        finally:
            trainer.kill()
            # the pipes close once the trainer's workers are gone too (they notice its
            # death within seconds and clean up after themselves): the folder is judged then
            _, errors = trainer.communicate(timeout=300)
        assert line == "received\n", errors
        left = sorted(p.name for p in temp.iterdir())
    assert [name for name in left if name.startswith("energon_lite")] == [], left
