"""End to end: loaders with 0, 1 and 2 workers; exact resume anywhere; refused states; failures."""

from __future__ import annotations

import copy
import ctypes
import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from energon_lite import (
    CaptioningSample,
    StateError,
    TaskEncoder,
    TooManyFailuresError,
    WorkerConfig,
    get_loader,
    get_savable_loader,
    get_train_dataset,
    get_val_dataset,
    stateless,
)
from energon_lite.cache import NoCachePool
from energon_lite.errors import ConfigError, WorkerTimeoutError
from energon_lite.state.codec import state_digest
from energon_lite.testing import assert_loader_resumes, take


class FlipEncoder(TaskEncoder):
    """Random flips from the per-sample generator: resumed batches must match pixel for pixel."""

    def encode_sample(self, sample: CaptioningSample) -> CaptioningSample:
        if self.sample_rng.random() < 0.5:
            sample.image = sample.image.flip(-1)
        return sample


def _train(path: Path, num_workers: int = 0, rank: int = 0, world_size: int = 1, **kwargs):
    options = {
        "batch_size": 8,
        "shuffle_buffer_size": 20,
        "max_samples_per_sequence": 10,
        "task_encoder": FlipEncoder(),
    }
    options.update(kwargs)
    wc = WorkerConfig(rank=rank, world_size=world_size, num_workers=num_workers)
    return get_train_dataset(path, worker_config=wc, **options)


def _keys_and_pixels(batch) -> tuple:
    return tuple(batch.__key__), float(batch.image.sum())


@pytest.mark.parametrize("num_workers", [0, 1, 2])
def test_resume_mid_epoch_at_boundary_and_across_epochs(train_ds: Path, num_workers: int) -> None:
    # 120 samples, batch 8: epoch boundaries fall around batch 15 and 30 (per worker they differ)
    assert_loader_resumes(
        lambda: get_savable_loader(_train(train_ds, num_workers)),
        total=40,
        save_points=[0, 1, 7, 15, 16, 31],
        key=_keys_and_pixels,
    )


def test_resume_right_after_a_restore(train_ds: Path) -> None:
    reference = [b.__key__ for b in take(get_savable_loader(_train(train_ds, 2)), 12)]
    first = get_savable_loader(_train(train_ds, 2))
    take(first, 5)
    second = get_savable_loader(_train(train_ds, 2))
    second.restore_state_rank(first.save_state_rank())
    state = second.save_state_rank()  # saved before any batch of the restored loader
    third = get_savable_loader(_train(train_ds, 2))
    third.restore_state_rank(state)
    assert [b.__key__ for b in take(third, 7)] == reference[5:]
    # iterating again continues where the last pass stopped
    assert [b.__key__ for b in take(second, 3)] == reference[5:8]
    assert [b.__key__ for b in take(second, 2)] == reference[8:10]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_one_epoch_without_repeat_covers_every_sample_once(
    train_ds: Path, num_workers: int
) -> None:
    loader = get_savable_loader(_train(train_ds, num_workers, repeat=False))
    batches = list(loader)
    keys = [k for batch in batches for k in batch.__key__]
    assert sorted(keys) == [f"{i:06d}" for i in range(120)]
    # 120 samples in batches of 8; with 2 workers each worker's last batch may be partial
    assert len(loader) == len(batches) == (15 if num_workers == 0 else len(batches))
    assert len(batches) == sum(
        -(-n // 8) for n in loader.dataset.pipeline.samples_per_epoch(loader.worker_config)
    )
    second_epoch = [k for batch in loader for k in batch.__key__]
    assert sorted(second_epoch) == sorted(keys) and second_epoch != keys
    assert_loader_resumes(
        lambda: get_savable_loader(_train(train_ds, num_workers, repeat=False)), 15, [3, 9, 15]
    )


def test_reproducible_scaling_of_global_batches(train_ds: Path) -> None:
    """The samples of each global batch depend only on world_size x num_workers."""

    def global_batches(world_size: int, num_workers: int, steps: int) -> list[set[str]]:
        per_rank = [
            [
                b.__key__
                for b in take(get_loader(_train(train_ds, num_workers, rank, world_size)), steps)
            ]
            for rank in range(world_size)
        ]
        accumulation = 4 // world_size  # micro-batches per global batch on each rank
        out = []
        for step in range(0, steps, accumulation):
            keys = {
                k for rank in per_rank for batch in rank[step : step + accumulation] for k in batch
            }
            out.append(keys)
        return out

    one_by_four = global_batches(1, 4, 8)
    assert global_batches(2, 2, 4) == one_by_four
    assert global_batches(4, 1, 2) == one_by_four[:2]
    assert global_batches(4, 0, 2) == one_by_four[:2]  # in-process loading counts as one worker


def test_val_is_ordered_with_limit(split_ds: Path) -> None:
    wc = WorkerConfig(rank=0, world_size=1, num_workers=2)
    val = get_val_dataset(split_ds, worker_config=wc, batch_size=4)
    keys = [k for batch in get_savable_loader(val) for k in batch.__key__]
    assert sorted(keys) == [f"{160 + i:06d}" for i in range(20)]
    assert [k for batch in get_savable_loader(val) for k in batch.__key__] == keys
    limited = get_val_dataset(split_ds, worker_config=wc, batch_size=4, limit=3)
    assert len(list(get_savable_loader(limited))) == 3
    test_keys = [
        k
        for b in get_loader(
            get_val_dataset(split_ds, worker_config=wc, batch_size=5, split_part="test")
        )
        for k in b.__key__
    ]
    assert sorted(test_keys) == [f"{180 + i:06d}" for i in range(20)]


def test_foreign_and_corrupt_states_are_refused(train_ds: Path, split_ds: Path) -> None:
    loader = get_savable_loader(_train(train_ds, 2))
    take(loader, 3)
    state = loader.save_state_rank()
    cases = {
        "batch_size: state has 8, this loader has 16": _train(train_ds, 2, batch_size=16),
        "num_workers: state has 2, this loader has 1": _train(train_ds, 1),
        "shuffle_buffer_size: state has 20, this loader has 30": _train(
            train_ds, 2, shuffle_buffer_size=30
        ),
        "world_size: state has 1, this loader has 2": _train(train_ds, 2, 0, 2),
        "datasets: state has": _train(split_ds, 2),
    }
    for message, dataset in cases.items():
        with pytest.raises(StateError, match=message):
            get_savable_loader(dataset).restore_state_rank(state)
    other_seed = get_train_dataset(
        train_ds,
        worker_config=WorkerConfig(0, 1, 2, seed_offset=9),
        batch_size=8,
        shuffle_buffer_size=20,
        max_samples_per_sequence=10,
        task_encoder=FlipEncoder(),
    )
    with pytest.raises(StateError, match="seed: state has 0, this loader has 9"):
        get_savable_loader(other_seed).restore_state_rank(state)
    fresh = get_savable_loader(_train(train_ds, 2))
    broken = copy.deepcopy(state["workers"][0])  # Batch <- Encode <- ShuffleBuffer <- Reader
    broken["source"]["source"] = {"type": "ShuffleBuffer", "rng": 1}
    edits = [
        ({**state, "workers": state["workers"][:1]}, "worker states, expected 2"),
        ({**state, "workers": [broken, state["workers"][1]]}, "ShuffleBuffer: state is missing"),
    ]
    for edited, message in edits:
        # any edit is refused by the digest, before any worker starts ...
        with pytest.raises(StateError, match="does not match its digest"):
            fresh.restore_state_rank(edited)
        # ... and a forged state (digest recomputed) by the shape check, naming the problem
        with pytest.raises(StateError, match=message):
            fresh.restore_state_rank({**edited, "digest": state_digest(edited)})
    with pytest.raises(StateError, match="not an energon_lite loader state"):
        fresh.restore_state_rank({"hello": 1})
    with pytest.raises(StateError, match="get_savable_loader"):
        get_loader(_train(train_ds, 0)).save_state_rank()


def test_state_round_trips_through_torch_save(train_ds: Path, tmp_path: Path) -> None:
    loader = get_savable_loader(_train(train_ds, 2))
    take(loader, 4)
    torch.save(loader.save_state_rank(), tmp_path / "loader.pt")
    resumed = get_savable_loader(_train(train_ds, 2))
    resumed.restore_state_rank(torch.load(tmp_path / "loader.pt", weights_only=True))
    assert [b.__key__ for b in take(resumed, 3)] == [b.__key__ for b in take(loader, 3)]


class Fails(TaskEncoder):
    def encode_sample(self, sample: CaptioningSample) -> CaptioningSample:
        raise ValueError(f"cannot encode {sample.__key__}")


class Dies(TaskEncoder):
    def encode_sample(self, sample: CaptioningSample) -> CaptioningSample:
        os._exit(3)


@pytest.mark.timeout(600)  # a hang guard only (a loaded machine is slow)
def test_worker_errors_reach_the_trainer(train_ds: Path) -> None:
    with pytest.raises(
        TooManyFailuresError, match=r"failure_tolerance=5\); last: encode_sample failed at key="
    ):
        list(take(get_loader(_train(train_ds, 2, task_encoder=Fails(), failure_tolerance=5)), 2))
    with pytest.raises(RuntimeError, match="exited unexpectedly"):
        list(take(get_loader(_train(train_ds, 2, task_encoder=Dies())), 2))


def test_bad_arguments(train_ds: Path) -> None:
    # 8 ranks, one slice per shard: every rank still gets a range of the 120 samples
    _train(train_ds, 0, rank=7, world_size=8, max_samples_per_sequence=None)
    with pytest.raises(
        ConfigError,
        match=r"rank 127 has no data: the split has 120 samples, fewer than world_size x num_workers = 128 x 1 = 128 global workers",
    ):
        _train(train_ds, 0, rank=127, world_size=128, max_samples_per_sequence=None)
    with pytest.raises(ConfigError, match=r"unknown arguments \['shuffle_buffer'\]"):
        get_train_dataset(
            train_ds,
            worker_config=WorkerConfig(0, 1, 0),
            batch_size=1,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            shuffle_buffer=3,
        )
    with pytest.raises(ConfigError, match="does not exist"):
        _train(train_ds / "nope")


def test_unpicklable_batches_raise_instead_of_hanging(train_ds: Path) -> None:
    class LocalBatch:  # defined in a function: worker processes cannot pickle it by reference
        def __init__(self, keys: list[str]) -> None:
            self.__key__ = keys

    class LocalEncoder(TaskEncoder):
        def batch(self, samples: list[CaptioningSample]) -> LocalBatch:
            return LocalBatch([s.__key__ for s in samples])

    with pytest.raises(
        ConfigError, match=r"worker 0: a batch of type .*LocalBatch.* cannot be pickled"
    ):
        list(take(get_loader(_train(train_ds, 2, task_encoder=LocalEncoder())), 2))
    assert len(list(take(get_loader(_train(train_ds, 0, task_encoder=LocalEncoder())), 2))) == 2


class LateLock(TaskEncoder):
    """Batches pickle until the fifth, which carries a lock (the queue cannot send it)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def encode_batch(self, batch: Any) -> Any:
        self.count += 1
        return {"keys": batch.__key__, "lock": threading.Lock() if self.count == 5 else None}


@pytest.mark.timeout(600)  # a hang guard only (a loaded machine is slow)
def test_an_unpicklable_batch_after_the_first_raises_naming_its_keys(train_ds: Path) -> None:
    loader = get_loader(_train(train_ds, 1, task_encoder=LateLock()))
    with pytest.raises(ConfigError, match=r"worker 0: a batch of type builtins.dict .*lock"):
        take(loader, 10)


FIRST_BATCH = """
import sys
from energon_lite import WorkerConfig, get_loader, get_train_dataset

dataset = get_train_dataset(
    sys.argv[1],
    worker_config=WorkerConfig(rank=0, world_size=1, num_workers=1),
    batch_size=4,
    shuffle_buffer_size=None,
    max_samples_per_sequence=None,
)
print(next(iter(get_loader(dataset))).image.shape, flush=True)
"""


@pytest.mark.timeout(600)  # a hang guard only: a subprocess and its pool on a loaded machine
def test_a_temp_folder_too_long_for_a_socket_raises_instead_of_hanging(
    train_ds: Path, tmp_path: Path
) -> None:
    """A worker sends tensors through a Unix socket in the temp folder, whose path may have
    107 bytes: a longer one dropped every batch in torch's queue thread, and the trainer
    waited for ever. Now the worker refuses at its start, naming TMPDIR."""
    temp = tmp_path / ("t" * max(1, 90 - len(str(tmp_path))))  # a 90-character TMPDIR
    temp.mkdir()
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(root)}
    run = subprocess.run(
        [sys.executable, "-c", FIRST_BATCH, str(train_ds)],
        capture_output=True,
        env=env,
        text=True,
        timeout=540,
    )
    assert run.returncode != 0, run.stdout
    assert "ConfigError: worker 0: batches with tensors cannot be sent" in run.stderr
    assert f"TMPDIR={str(temp)!r}" in run.stderr
    assert "AF_UNIX path too long" in run.stderr


class ReleasedByTheReport(logging.FileHandler):
    """Writes the records to ``path`` (a worker process inherits it); the watchdog's report of
    a stall in stage Encode releases the stalled worker (``stall_ends``), so the stall lasts
    exactly until the report, however busy the machine."""

    def __init__(self, path: Path, stall_ends: Callable[[], None]) -> None:
        super().__init__(path)
        self.stall_ends = stall_ends

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        if "made no progress" in record.getMessage() and "in stage Encode" in record.getMessage():
            self.stall_ends()


@pytest.mark.timeout(600)  # a hang guard only (a loaded machine is slow)
def test_the_watchdog_logs_where_a_stalled_worker_is(train_ds: Path, tmp_path: Path) -> None:
    encoder = Stalled()
    # the worker process inherits this handler; its records land in the file, and the report
    # releases the stalled worker: the batch comes only after the report
    handler = ReleasedByTheReport(tmp_path / "worker.log", encoder.release)
    logging.getLogger("energon_lite").addHandler(handler)
    loader = get_loader(
        _train(train_ds, 1, task_encoder=encoder, batch_size=2),
        # a report of an earlier, slow stage (a busy machine) releases nothing: the stall in
        # Encode is reported once the worker has stood still in it this long
        watchdog_timeout_seconds=0.5,
        watchdog_initial_timeout_seconds=0.5,
    )
    try:
        take(loader, 1)
    finally:
        encoder.release()
        logging.getLogger("energon_lite").removeHandler(handler)
        handler.close()
    log = (tmp_path / "worker.log").read_text()
    assert "worker 0 made no progress for" in log
    assert "in stage Encode on sample '0" in log  # the stalled sample's key
    assert "encode_sample" in log  # the stack


@pytest.mark.timeout(600)  # a hang guard only (a loaded machine is slow)
def test_a_worker_waiting_for_the_trainer_is_not_a_stall(train_ds: Path, tmp_path: Path) -> None:
    """A training step longer than the watchdog's timeout: the workers have made their
    batches and wait for torch to ask for the next ones; nothing is logged."""
    handler = logging.FileHandler(tmp_path / "worker.log")
    logging.getLogger("energon_lite").addHandler(handler)
    try:
        loader = get_savable_loader(
            _train(train_ds, 2, batch_size=2),
            # 6 s: far more than a batch of 2 tiny samples takes, even on a loaded machine
            watchdog_timeout_seconds=6,
            watchdog_initial_timeout_seconds=60,
        )
        take(loader, 1)
        time.sleep(7)  # the trainer's step, longer than the watchdog's timeout
        take(loader, 3)
        loader.close()
    finally:
        logging.getLogger("energon_lite").removeHandler(handler)
    assert "made no progress" not in (tmp_path / "worker.log").read_text()


NOTICE = "rank 0: no batch from worker 0"  # the trainer's notice of a late batch
RECORD = "\n@record@ "  # starts each record in the log file (a stack spans lines)


def _notices(log: Path) -> int:
    return log.read_text().count(NOTICE) if log.exists() else 0


def _hold_the_interpreter(log: Path) -> None:
    """Wait in native code that keeps the interpreter lock (as a library's teardown waiting
    for threads a forked worker never had): the worker's own threads cannot run. Until the
    trainer has noticed the late batch (at most 120 s)."""
    libc = ctypes.PyDLL(None)  # PyDLL: the call keeps the GIL
    deadline = time.monotonic() + 120
    while _notices(log) == 0 and time.monotonic() < deadline:
        libc.sleep(1)  # a signal (the stack dump) ends it early


def _wait_in_python(log: Path) -> None:
    """Wait in Python until the trainer notices one more late batch (at most 120 s)."""
    seen, deadline = _notices(log), time.monotonic() + 120
    while _notices(log) == seen and time.monotonic() < deadline:
        time.sleep(0.05)


class LateTwice(TaskEncoder):
    """The first sample waits holding the interpreter lock (before the worker has sent
    anything); the seventh (the fourth batch of 2) in Python: each until the trainer's log
    in ``log`` shows its notice of the late batch (conditions, not guessed sleeps)."""

    def __init__(self, log: Path) -> None:
        super().__init__()
        self.log, self.count = log, 0

    def encode_sample(self, sample: CaptioningSample) -> CaptioningSample:
        self.count += 1
        if self.count == 1:
            _hold_the_interpreter(self.log)
        elif self.count == 7:
            _wait_in_python(self.log)
        return sample


@pytest.mark.timeout(600)  # a hang guard only: each wait above ends on a condition
def test_the_trainer_logs_a_late_batch_with_its_workers_stack(
    train_ds: Path, tmp_path: Path
) -> None:
    log = tmp_path / "trainer.log"
    handler = logging.FileHandler(log)  # the worker inherits it: its watchdog's records too
    handler.setFormatter(logging.Formatter(RECORD + "%(message)s"))
    logging.getLogger("energon_lite").addHandler(handler)
    try:
        loader = get_savable_loader(
            _train(train_ds, 1, batch_size=2, task_encoder=LateTwice(log)),
            watchdog_timeout_seconds=1,
            # the worker is in its first sample by then, however busy the machine
            watchdog_initial_timeout_seconds=15,
        )
        assert len(take(loader, 5)) == 5  # the run goes on
        loader.close()
    finally:
        logging.getLogger("energon_lite").removeHandler(handler)
    # the trainer's notices, each alone (not with the worker's records after it)
    notices = [r for r in log.read_text().split(RECORD) if r.startswith(NOTICE)]
    assert all("(pid " in n and "the process is alive" in n and "its stack:" in n for n in notices)
    # taken while the worker held the lock its own watchdog needs; then each notice with the
    # stack of its own moment (a loaded machine may add a notice for a merely slow batch:
    # the test asks for these two, in order, not for their number)
    held = [i for i, n in enumerate(notices) if "in _hold_the_interpreter" in n]
    waited = [i for i, n in enumerate(notices) if "in _wait_in_python" in n]
    assert held and waited and held[0] < waited[0], notices
    assert all("_hold_the_interpreter" not in notices[i] for i in waited)


def test_corrupt_values_are_refused_when_the_worker_restores(train_ds: Path) -> None:
    loader = get_savable_loader(_train(train_ds, 2))
    take(loader, 3)
    state = copy.deepcopy(loader.save_state_rank())
    reader_state = state["workers"][0]["source"]["source"][
        "source"
    ]  # Batch<-Encode<-Shuffle<-Reader
    assert reader_state["type"] == "Reader"
    reader_state["open"] = [[999, 0]]
    resumed = get_savable_loader(_train(train_ds, 2))
    with pytest.raises(StateError, match="does not match its digest"):
        resumed.restore_state_rank(state)  # an edit: refused in the trainer
    state["digest"] = state_digest(state)  # a forged state: the shape is right, but the
    # ownership check of every restore (resume/restore.py) refuses it in the trainer, before
    # any worker starts
    with pytest.raises(StateError, match="Reader has slice 999 open, outside the leaf's"):
        resumed.restore_state_rank(state)


def test_energon_loader_arguments(train_ds: Path) -> None:
    dataset = _train(train_ds, 2)
    loader = get_savable_loader(dataset, worker_config=dataset.worker_config, checkpoint_every_sec=60,
                                n_checkpoints=2, gc_collect_every_n_steps=10, prefetch_factor=2)  # fmt: skip
    assert len(take(loader, 2)) == 2
    with pytest.raises(ConfigError, match="differs from the dataset's"):
        get_loader(dataset, worker_config=WorkerConfig(rank=0, world_size=1, num_workers=1))
    pool = NoCachePool()  # Energon's cache_pool= reaches the cookers as TaskEncoder.cache
    get_loader(dataset, cache_pool=pool)
    assert dataset.pipeline.task_encoder.cache is pool
    with pytest.raises(ConfigError, match=r"get_loader\(batch_size=\.\.\.\): an argument of get_"):
        get_loader(dataset, batch_size=3)  # a dataset's argument, said so
    with pytest.raises(ConfigError, match=r"unknown loader arguments \['prefetch'\]"):
        get_loader(dataset, prefetch=3)
    config = loader.config()  # Energon's SavableDataLoader.config(), for a training log
    assert config["type"] == "SavableDataLoader" and config["num_workers"] == 2
    assert config["prefetch_factor"] == 2 and config["persistent_workers"] is True
    assert config["dataset"] == dataset.energon_view().config()  # Energon's tree
    assert dataset.config()["world_size"] == 1 and dataset.config()["datasets"]  # ours


class Stalled(TaskEncoder):
    """Blocks every sample until ``release()`` (a condition, not a guessed sleep; one blocking
    call, so the worker stands still on one line), for at most 120 s. A pipe the forked
    worker inherits: a worker killed while it waits leaves nothing locked."""

    def __init__(self) -> None:
        super().__init__()
        self._released, self._release = os.pipe()

    def release(self) -> None:
        os.write(self._release, b"x")

    def encode_sample(self, sample: CaptioningSample) -> CaptioningSample:
        select.select([self._released], [], [], 120)
        return sample


@pytest.mark.timeout(600)  # a hang guard only (a loaded machine is slow)
def test_fail_on_timeout_raises_instead_of_waiting(train_ds: Path) -> None:
    encoder = Stalled()
    dataset = _train(train_ds, 1, task_encoder=encoder, batch_size=2)
    loader = get_loader(dataset, fail_on_timeout=True, watchdog_timeout_seconds=0.5)
    try:
        with pytest.raises(WorkerTimeoutError, match=r"rank 0: worker 0 .* timed out: no batch"):
            take(loader, 1)
    finally:
        encoder.release()  # let a still-running worker finish


class BadBatches(TaskEncoder):
    def batch(self, samples: list[CaptioningSample]) -> list[str]:
        raise ValueError("cannot collate these")


@pytest.mark.timeout(600)  # a hang guard only (a loaded machine is slow)
def test_failing_batches_stop_the_run_although_samples_encode(train_ds: Path) -> None:
    """Each stage counts its own failure streak: good samples must not hide bad batches."""
    loader = get_loader(_train(train_ds, 0, task_encoder=BadBatches(), failure_tolerance=3))
    with pytest.raises(
        TooManyFailuresError,
        match=r"4 consecutive failures \(failure_tolerance=3\); last: batch failed",
    ):
        take(loader, 1)


def test_get_loader_continues_the_stream_across_passes(train_ds: Path) -> None:
    """Energon's loaders continue where the last pass stopped: islice twice = the first 2n."""
    reference = [b.__key__ for b in take(get_loader(_train(train_ds, 2)), 6)]
    loader = get_loader(_train(train_ds, 2))
    first = [b.__key__ for b in take(loader, 3)]
    second = [b.__key__ for b in take(loader, 3)]
    assert first + second == reference
    savable = get_savable_loader(_train(train_ds, 0))
    take(savable, 2)
    state = savable.save_state_rank()
    after = [b.__key__ for b in take(savable, 2)]
    resumed = get_savable_loader(_train(train_ds, 0))
    resumed.restore_state_rank(state)
    assert [b.__key__ for b in take(resumed, 2)] == after


@pytest.mark.parametrize("num_workers", [0, 2])
def test_virtual_epochs_yield_n_batches_per_pass_and_resume_inside_one(
    train_ds: Path, num_workers: int
) -> None:
    def make() -> Any:
        return get_savable_loader(_train(train_ds, num_workers, virtual_epoch_length=4))

    reference = [b.__key__ for b in take(get_loader(_train(train_ds, num_workers)), 12)]
    loader = make()
    assert len(loader) == 4
    passes = [[b.__key__ for b in loader] for _ in range(3)]
    assert [len(p) for p in passes] == [4, 4, 4]
    assert [k for p in passes for k in p] == reference  # each pass continues the stream
    # save inside the second pass, after 2 of its 4 batches
    loader = make()
    list(loader)
    iterator = iter(loader)
    take(iterator, 2)
    state = loader.save_state_rank()
    resumed = make()
    resumed.restore_state_rank(state)
    assert [b.__key__ for b in resumed] == reference[6:8]  # the rest of that pass
    assert [b.__key__ for b in resumed] == reference[8:12]


def test_virtual_epoch_length_of_a_billion_costs_nothing(train_ds: Path) -> None:
    loader = get_savable_loader(_train(train_ds, 0, virtual_epoch_length=10**9))
    assert len(loader) == 10**9
    assert len(take(loader, 3)) == 3
    with pytest.raises(ConfigError, match="virtual_epoch_length=-1 must be an integer >= 1"):
        _train(train_ds, 0, virtual_epoch_length=-1)


class GlobalRandomEncoder(TaskEncoder):
    """Augments with the global generators, as many Energon encoders do."""

    @stateless(restore_seeds=True)
    def encode_sample(self, sample: CaptioningSample) -> CaptioningSample:
        import random

        import numpy as np

        noise = float(np.random.rand()) + random.random() + float(torch.rand(()))
        return CaptioningSample.derive_from(
            sample, image=sample.image + noise, caption=sample.caption
        )


@pytest.mark.parametrize("num_workers", [0, 2])
def test_restore_seeds_makes_global_randomness_resume_exactly(
    train_ds: Path, num_workers: int
) -> None:
    import numpy as np

    before = np.random.get_state()[1][:4].tolist()
    assert_loader_resumes(
        lambda: get_savable_loader(
            _train(train_ds, num_workers, task_encoder=GlobalRandomEncoder())
        ),
        8,
        [0, 3, 5],
    )
    assert np.random.get_state()[1][:4].tolist() == before  # the global state was put back


class GlobalRandomGeneratorEncoder(TaskEncoder):
    """A generator hook drawing from the global generators between its outputs."""

    @stateless(restore_seeds=True)
    def encode_sample(self, sample: CaptioningSample) -> Any:
        import random

        for _ in range(2):
            yield CaptioningSample.derive_from(
                sample, image=sample.image, caption=f"{random.randint(0, 10**9)}"
            )


@pytest.mark.parametrize("num_workers", [0, 2])
def test_restore_seeds_on_a_generator_hook_gives_each_output_again(
    train_ds: Path, num_workers: int
) -> None:
    """Energon seeds a generator hook before its first output and carries the seeded state
    from output to output; so the outputs are made again exactly, by restore_sample and by a
    resume that re-runs the hook part-way through (they were drawn unseeded before)."""
    import random

    random.seed(1)
    loader = get_savable_loader(
        _train(train_ds, num_workers, task_encoder=GlobalRandomGeneratorEncoder())
    )
    batches = take(loader, 4)
    for batch in batches:
        again = loader.restore_sample(batch.__restore_key__)
        assert again.caption == batch.caption
    assert_loader_resumes(
        lambda: get_savable_loader(
            _train(train_ds, num_workers, task_encoder=GlobalRandomGeneratorEncoder())
        ),
        8,
        [0, 3, 5],
    )


def test_energons_older_decoder_arguments_warn_and_map(train_ds: Path) -> None:
    from PIL import Image

    with pytest.warns(FutureWarning, match=r"SampleDecoder\(image_decode='pil'\)"):
        dataset = _train(train_ds, 0, task_encoder=TaskEncoder(), image_decode="pil")
    batch = next(iter(dataset))
    assert all(isinstance(image, Image.Image) for image in batch.image)
    with pytest.warns(FutureWarning, match="handler=...\\) is Energon's deprecated argument"):
        _train(train_ds, 0, handler=print)
    raw = TaskEncoder()
    with pytest.warns(FutureWarning):
        _train(train_ds, 0, task_encoder=raw, auto_decode=False, handler=print)
    assert raw.decoder is None


def test_energons_argument_forms_live_in_compat_not_in_the_core(train_ds: Path) -> None:
    """The public entry points take Energon's forms (energon_lite.compat.arguments) and warn
    at the caller's line; the core's own functions carry none of them."""
    from energon_lite.loader import api

    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    core = {"worker_config": wc, "batch_size": 2, "task_encoder": TaskEncoder()}
    with pytest.raises(ConfigError, match=r"unknown arguments \['image_decode'\]"):
        api.get_train_dataset(
            train_ds,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            image_decode="pil",
            **core,
        )
    with pytest.raises(ConfigError, match=r"unknown arguments \['max_samples_per_sequence'\]"):
        api.get_val_dataset(train_ds, max_samples_per_sequence=4, **core)
    dataset = get_val_dataset(train_ds, split_part="train", max_samples_per_sequence=4, **core)
    with pytest.raises(ConfigError, match=r"unknown loader arguments \['n_checkpoints'\]"):
        api.get_loader(dataset, n_checkpoints=2)
    get_loader(dataset, n_checkpoints=2, worker_config=wc)
    with pytest.warns(FutureWarning) as caught:
        get_train_dataset(train_ds, shuffle_buffer_size=None, max_samples_per_sequence=None,
                          image_decode="pil", **core)  # fmt: skip
    assert caught[0].filename == __file__


def test_a_dropped_loader_shuts_its_workers_down_at_once(train_ds: Path) -> None:
    """Dropping a loader mid-pass frees it by reference counting, so its workers get the
    shutdown message at once (in a reference cycle, the garbage collector would finalise the
    DataLoader's queues first and shutdown would wait out torch's 5 s join per worker)."""
    import gc
    import multiprocessing

    gc.disable()
    try:
        before = set(multiprocessing.active_children())  # other tests' live loaders
        loader = get_savable_loader(_train(train_ds, num_workers=2))
        batches = iter(loader)
        next(batches)
        workers = set(multiprocessing.active_children()) - before
        assert len(workers) == 2
        del batches, loader
        assert not workers & set(multiprocessing.active_children())
    finally:
        gc.enable()


@pytest.mark.timeout(600)  # a hang guard only (a loaded machine is slow)
@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_a_loader_in_a_reference_cycle_shuts_its_workers_down(
    train_ds: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trainer object that refers to itself takes its loader into the collector's hands;
    the workers still get the shutdown message. (Had a queue been finalised before torch's
    iterator, shutdown would wait out torch's join timeout per worker: set to 120 s here, so
    this test's timeout interrupts that wait inside the collector, an error reported as
    unraisable, which fails the test.)"""
    import gc
    import multiprocessing

    from torch.utils.data import _utils

    monkeypatch.setattr(_utils, "MP_STATUS_CHECK_INTERVAL", 120.0)

    class Trainer:
        def __init__(self) -> None:
            self.me = self
            self.loader = get_savable_loader(_train(train_ds, num_workers=2))
            self.batches = iter(self.loader)

    before = set(multiprocessing.active_children())
    trainer = Trainer()
    next(trainer.batches)
    workers = set(multiprocessing.active_children()) - before
    assert len(workers) == 2
    del trainer
    gc.collect()
    assert [w.exitcode for w in workers] == [0, 0]  # each got the message and exited
