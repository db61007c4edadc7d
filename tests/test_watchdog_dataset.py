"""``WatchdogDataset`` (Energon's ``megatron.energon.wrappers.watchdog_dataset``): a batch
that takes longer than the timeout calls ``_watchdog_trigger``, with or without worker
processes; the stream, its length and its saved states are the wrapped dataset's."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from energon_lite import (
    CaptioningSample,
    TaskEncoder,
    WorkerConfig,
    get_loader,
    get_savable_loader,
    get_train_dataset,
)
from energon_lite.errors import ConfigError
from energon_lite.wrappers.watchdog_dataset import WatchdogDataset

# Generous against a loaded machine: a fast batch of 2 tiny samples (milliseconds) stays far
# under it also when the process gets a tenth of a core; the slow ones wait on conditions
TIMEOUT_S = 6.0


class SlowOnce(TaskEncoder):
    """Over the ``at``-th sample it encodes, once, waits until ``until()`` is true (the
    watchdog has fired: a condition, not a guessed sleep), for at most 60 s."""

    def __init__(self, at: int, until: Callable[[], bool] = lambda: True) -> None:
        super().__init__()
        self.at, self.until, self.count = at, until, 0

    def encode_sample(self, sample: CaptioningSample) -> CaptioningSample:
        self.count += 1
        if self.count == self.at:
            deadline = time.monotonic() + 60
            while not self.until() and time.monotonic() < deadline:
                time.sleep(0.01)
        return sample


class Recording(WatchdogDataset):
    triggers = 0

    def _watchdog_trigger(self) -> None:
        type(self).triggers += 1


def _dataset(path: Path, encoder: TaskEncoder, num_workers: int = 0) -> Any:
    wc = WorkerConfig(rank=0, world_size=1, num_workers=num_workers)
    return get_train_dataset(
        path, worker_config=wc, batch_size=2, shuffle_buffer_size=None,
        max_samples_per_sequence=None, task_encoder=encoder,
    )  # fmt: skip


def _keys(loader: Any, n: int) -> list[list[str]]:
    return [batch.__key__ for _, batch in zip(range(n), loader)]


@pytest.mark.timeout(600)  # a hang guard only (a loaded machine is slow)
def test_a_stalled_batch_triggers_and_a_fast_one_does_not(train_ds: Path) -> None:
    Recording.triggers = 0
    slow = _dataset(train_ds, SlowOnce(at=9, until=lambda: Recording.triggers > 0))
    watched = Recording(
        slow, slow.worker_config, timeout_seconds=TIMEOUT_S, initial_timeout_seconds=30
    )
    _keys(get_loader(watched, watchdog_timeout_seconds=None), 8)
    assert Recording.triggers == 1  # the one slow sample, once

    Recording.triggers = 0
    fast = _dataset(train_ds, SlowOnce(at=0))
    watched = Recording(
        fast, fast.worker_config, timeout_seconds=TIMEOUT_S, initial_timeout_seconds=30
    )
    batches = iter(get_loader(watched, watchdog_timeout_seconds=None))
    next(batches)
    time.sleep(TIMEOUT_S + 1)  # a training step longer than the timeout is no stall,
    next(batches)  # neither while the loader waits nor in the batch after it
    assert Recording.triggers == 0


@pytest.mark.timeout(600)  # a hang guard only (a loaded machine is slow)
def test_get_loader_wraps_with_energons_warning(train_ds: Path) -> None:
    caught: list[warnings.WarningMessage] = []
    dataset = _dataset(train_ds, SlowOnce(at=3, until=lambda: bool(caught)))
    loader = get_loader(
        dataset, watchdog_timeout_seconds=TIMEOUT_S, watchdog_initial_timeout_seconds=30
    )
    assert isinstance(loader.dataset, WatchdogDataset)
    with warnings.catch_warnings(record=True) as recorded:
        warnings.simplefilter("always")
        caught = recorded  # the slow sample waits until the watchdog's warning is here
        _keys(loader, 4)
    messages = [str(w.message) for w in caught if w.category is RuntimeWarning]
    assert messages == [
        f"Watchdog triggered. Sample processing took longer than {TIMEOUT_S} seconds."
    ]


def test_the_stream_and_states_are_the_wrapped_datasets(train_ds: Path) -> None:
    plain = _dataset(train_ds, SlowOnce(at=0), num_workers=1)
    watched = WatchdogDataset(plain, plain.worker_config, timeout_seconds=30)
    assert len(watched) == len(plain) and watched.config() == plain.config()
    ours, theirs = get_savable_loader(watched), get_savable_loader(plain)
    assert _keys(ours, 3) == _keys(theirs, 3)
    state = ours.save_state_rank()
    resumed = get_savable_loader(_dataset(train_ds, SlowOnce(at=0), num_workers=1))
    resumed.restore_state_rank(state)  # a watched loader's state restores unwatched
    assert _keys(resumed, 3) == _keys(theirs, 3)


def test_settings_are_checked(train_ds: Path) -> None:
    dataset = _dataset(train_ds, SlowOnce(at=0))
    with pytest.raises(ConfigError, match="timeout_seconds=0"):
        WatchdogDataset(dataset, dataset.worker_config, timeout_seconds=0)
    other = WorkerConfig(rank=0, world_size=1, num_workers=2)
    with pytest.raises(ConfigError, match="differs from the wrapped dataset"):
        WatchdogDataset(dataset, other)
