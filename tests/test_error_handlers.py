"""``WorkerConfig(global_error_handler=..., restore_error_handler=...)`` as in Energon: the
global handler gets ``(exception, sample, sources)`` for each failing sample (the typed
sample for ``encode_sample``), may raise to stop the run, and ``failure_tolerance`` still
bounds a failure streak; the restore handler gets what failed to be fetched again while a
state is restored (default: raise)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import energon_lite
from energon_lite import (
    CaptioningSample,
    DefaultTaskEncoder,
    WorkerConfig,
    get_loader,
    get_savable_loader,
    get_train_dataset,
)
from energon_lite.errors import TooManyFailuresError
from energon_lite.testing import take


class _Stop(Exception):
    pass


class _FailsOn(DefaultTaskEncoder):
    """Fails ``encode_sample`` for keys ending in one of ``bad`` (a class-level set)."""

    bad: set[str] = set()

    def encode_sample(self, sample: CaptioningSample) -> CaptioningSample:
        if any(sample.__key__.endswith(b) for b in self.bad):
            raise ValueError(f"bad sample {sample.__key__}")
        return sample


def _dataset(root: Path, wc: WorkerConfig, te: Any, **kw: Any) -> Any:
    kw.setdefault("batch_size", 4)
    return get_train_dataset(root, worker_config=wc, shuffle_buffer_size=None,
                             max_samples_per_sequence=None, task_encoder=te, **kw)  # fmt: skip


def test_global_handler_gets_the_typed_sample_and_the_run_goes_on(train_ds: Path) -> None:
    calls: list[tuple[str, Any, Any]] = []
    wc = WorkerConfig(0, 1, 0, global_error_handler=lambda e, s, src: calls.append((type(e).__name__, s, src)))  # fmt: skip
    te = _FailsOn()
    te.bad = {"000003", "000007"}
    keys = [k for b in get_loader(_dataset(train_ds, wc, te, repeat=False)) for k in b.__key__]
    assert len(keys) == 118 and not any(k.endswith(("000003", "000007")) for k in keys)
    assert [c[0] for c in calls] == ["ValueError", "ValueError"]
    assert all(isinstance(c[1], CaptioningSample) for c in calls)
    assert sorted(c[1].__key__[-6:] for c in calls) == ["000003", "000007"]
    assert all(c[2] and c[2][0].shard_name.endswith(".tar") for c in calls)  # __sources__


def test_a_raising_global_handler_stops_the_run(train_ds: Path) -> None:
    def stop(exc: Exception, sample: Any, sources: Any) -> None:
        raise _Stop(sample.__key__) from exc

    te = _FailsOn()
    te.bad = {"000005"}
    with pytest.raises(_Stop, match="000005"):
        take(
            get_loader(_dataset(train_ds, WorkerConfig(0, 1, 0, global_error_handler=stop), te)), 10
        )


def test_failure_tolerance_still_bounds_a_streak_with_a_handler(train_ds: Path) -> None:
    calls: list[Any] = []
    te = _FailsOn()
    te.bad = {""}  # every sample fails
    wc = WorkerConfig(0, 1, 0, global_error_handler=lambda e, s, src: calls.append(s))
    with pytest.raises(TooManyFailuresError, match="failure_tolerance=3"):
        take(get_loader(_dataset(train_ds, wc, te, failure_tolerance=3)), 1)
    assert len(calls) == 4  # each failure reaches the handler, the 4th ends the streak


class _Grouped(_FailsOn):
    """Buckets by caption length parity, so that a state holds encoded samples."""

    def batch_group_criterion(self, sample: CaptioningSample) -> tuple[Any, int]:
        return len(sample.caption) % 2, 4


def _saved_with_held_samples(root: Path) -> tuple[dict[str, Any], list[str]]:
    te = _Grouped()
    te.bad = set()
    loader = get_savable_loader(_dataset(root, WorkerConfig(0, 1, 0), te, batch_size=None))
    take(loader, 2)
    state = loader.save_state_rank()
    rest = [k for b in take(loader, 6) for k in b.__key__]
    loader.close()
    return state, rest


def test_restore_handler_default_raises_and_a_returning_one_drops_the_item(train_ds: Path) -> None:
    state, rest = _saved_with_held_samples(train_ds)
    held = rest[0][-6:]  # the first key of the next batch was buffered when the state was saved
    te = _Grouped()
    te.bad = {held}
    loader = get_savable_loader(_dataset(train_ds, WorkerConfig(0, 1, 0), te, batch_size=None))
    loader.restore_state_rank(state)
    with pytest.raises(ValueError, match=f"bad sample .*{held}"):
        take(loader, 1)
    loader.close()

    failed: list[Any] = []
    wc = WorkerConfig(0, 1, 0, restore_error_handler=lambda e, key, src: failed.append(key))
    loader = get_savable_loader(_dataset(train_ds, wc, te, batch_size=None))
    loader.restore_state_rank(state)
    keys = [k for b in take(loader, 6) for k in b.__key__]
    loader.close()
    assert len(failed) == 1 and held not in [k[-6:] for k in keys]
    # the bucket's other held samples come back first, in their order
    assert keys[:3] == [k for k in rest[:4] if not k.endswith(held)]


def _first_keys_fail(lib: Any, fails: int, tolerance: int | None) -> Any:
    class Encoder(lib.DefaultTaskEncoder):
        @lib.stateless(failure_tolerance=tolerance)
        def encode_sample(self, sample: Any) -> Any:
            if int(sample.__key__) < fails:
                raise ValueError(f"bad sample {sample.__key__}")
            return sample

    return Encoder()


@pytest.mark.parametrize(("fails", "tolerance"), [(2, 3), (3, 3), (10, 0), (2, None)])
@pytest.mark.usefixtures("collector_spared")  # Energon collects garbage
def test_stateless_failure_tolerance_as_in_energon(
    dataset_factory: Any, tmp_path: Path, fails: int, tolerance: int | None
) -> None:
    """``@stateless(failure_tolerance=n)``: the n-th consecutive failure of that hook stops
    the run, 0 never does, None keeps the loader's; megatron-energon is the oracle."""
    energon = pytest.importorskip("megatron.energon")
    root = dataset_factory(tmp_path, 40, 20, [("val", 1)])
    outcomes = []
    for lib in (energon, energon_lite):
        wc = lib.WorkerConfig(rank=0, world_size=1, num_workers=0)
        te = _first_keys_fail(lib, fails, tolerance)
        dataset = lib.get_val_dataset(root, worker_config=wc, batch_size=None, task_encoder=te)
        try:
            outcomes.append(sorted(s.__key__ for s in lib.get_loader(dataset)))
        except Exception as error:  # Energon's FatalSampleError, our TooManyFailuresError
            outcomes.append(type(error).__name__)
    theirs, ours = outcomes
    if theirs == "FatalSampleError":
        assert ours == TooManyFailuresError.__name__
    else:
        assert ours == theirs == [f"{i:06d}" for i in range(fails, 40)]


def test_stateless_failure_tolerance_is_checked() -> None:
    from energon_lite import stateless
    from energon_lite.errors import ConfigError

    with pytest.raises(ConfigError, match="failure_tolerance=-1"):
        stateless(failure_tolerance=-1)
