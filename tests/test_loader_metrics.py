"""``loader.metrics()``: windows of ``stats()`` as flat numbers, which a real TensorBoard
writer stores and its reader gives back; the mix per source; shard cache hits and misses and
a retry counted in the workers against a real S3 server on 127.0.0.1 behind a proxy that
answers one SlowDown."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest import make_dataset, write_two_leaves

from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset, get_val_dataset
from energon_lite.errors import ConfigError


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("metrics") / "captions", 200, 25)


def _loader(path: Path, workers: int, stats: bool = True, batch_size: int = 8):
    dataset = get_train_dataset(
        path,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=workers),
        batch_size=batch_size,
        shuffle_buffer_size=20,
        max_samples_per_sequence=10,
    )
    return get_savable_loader(dataset, stats=stats)


def _take(loader, batches: int) -> None:
    for step, _ in enumerate(loader):
        if step == batches - 1:
            break


def test_metrics_are_windows_of_the_stats(dataset_path: Path) -> None:
    loader = _loader(dataset_path, workers=2)
    try:
        _take(loader, 6)
        first = loader.metrics()
        _take(loader, 4)
        second = loader.metrics()
        stats = loader.stats()
    finally:
        loader.close()
    assert all(isinstance(v, float) and math.isfinite(v) for v in {**first, **second}.values())
    assert first["loader/batches"] == 6 and first["loader/samples"] == 48
    assert second["loader/batches"] == 4 and second["loader/samples"] == 32
    assert stats["batches"] == 10  # the windows add up to the whole
    for window in (first, second):
        shares = [v for k, v in window.items() if k.endswith("/time_share")]
        assert sum(shares) == pytest.approx(1.0, abs=1e-6) and min(shares) >= 0
        assert {"reader", "shufflebuffer", "encode", "batch", "other"} == {
            k.split("/")[2] for k in window if k.endswith("/time_share")
        }
        assert window["loader/samples_per_s"] > 0
        assert 0 <= window["loader/wait_fraction"] <= 1
        assert window["loader/wait_ms_per_batch"] >= 0
        for worker in ("0", "1"):
            assert 0 < window[f"loader/worker/{worker}/busy_fraction"] <= 1
        assert 0 < window["loader/buffer/shufflebuffer/fill"] <= 1
        assert window["loader/heals"] == 0 and window["loader/remote/retries"] == 0
        assert window["loader/cache/hits"] == window["loader/cache/misses"] == 0
    # a window with nothing received: zero counts, no rates to divide
    empty = _loader(dataset_path, workers=0)
    assert empty.metrics()["loader/batches"] == 0 and "loader/samples_per_s" not in empty.metrics()


def test_metrics_need_stats(dataset_path: Path) -> None:
    with pytest.raises(ConfigError, match="stats=True"):
        _loader(dataset_path, workers=0, stats=False).metrics()


def test_tensorboard_writer_stores_the_metrics(dataset_path: Path, tmp_path: Path) -> None:
    """The recipe of docs/performance.md: ``add_scalar`` per name, read back from the file."""
    pytest.importorskip("tensorboard", reason="pip install 'energon-lite[dev]' (tensorboard)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    loader = _loader(dataset_path, workers=0)
    logged: list[dict[str, float]] = []
    writer = SummaryWriter(log_dir=str(tmp_path / "runs"))
    for step, _ in enumerate(loader):
        if step % 3 == 2:
            logged.append(loader.metrics())
            for name, value in logged[-1].items():
                writer.add_scalar(name, value, global_step=step)
        if step == 11:
            break
    writer.close()
    events = EventAccumulator(str(tmp_path / "runs"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert set(logged[-1]) <= tags and "loader/stage/encode/time_share" in tags
    read = events.Scalars("loader/samples")
    assert [e.step for e in read] == [2, 5, 8, 11]
    assert [e.value for e in read] == [m["loader/samples"] for m in logged] == [24.0, 24, 24, 24]
    wait = events.Scalars("loader/wait_ms_per_batch")
    assert [e.value for e in wait] == pytest.approx([m["loader/wait_ms_per_batch"] for m in logged])


def test_mix_share_per_source_against_its_target(tmp_path: Path) -> None:
    paths = write_two_leaves(tmp_path)
    dataset = get_train_dataset(
        paths["weighted"],
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=10,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
    )
    loader = get_savable_loader(dataset, stats=True)
    _take(loader, 30)
    window = loader.metrics()
    mix = loader.mix()
    assert mix is not None
    assert window["loader/mix/0/target"] == pytest.approx(2 / 3)
    assert window["loader/mix/1/target"] == pytest.approx(1 / 3)
    assert window["loader/mix/0/share"] + window["loader/mix/1/share"] == pytest.approx(1.0)
    assert window["loader/mix/0/share"] == pytest.approx(mix["sources"][0]["sample_share"])
    assert 0.5 < window["loader/mix/0/share"] < 0.8  # 300 draws at 2:1
    _take(loader, 10)
    later = loader.mix()
    assert later is not None
    drawn = [b["samples"] - a["samples"] for a, b in zip(mix["sources"], later["sources"])]
    assert loader.metrics()["loader/mix/1/share"] == pytest.approx(drawn[1] / sum(drawn))


def test_cache_retries_and_remote_bytes_come_from_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("moto")
    pytest.importorskip("s3fs")
    from s3_fixtures import point_aws_at

    from energon_lite.storage import ShardCacheConfig, reset_session
    from energon_lite.synth.servers import FaultProxy, S3Server

    slowed: list[str] = []

    def one_slow_down(number: int, path: str) -> str | None:
        """S3's SlowDown for the first request of a shard: the worker retries it."""
        if ".tar" in path and ".idx" not in path and not slowed:
            slowed.append(path)
            return "503"
        return None

    local = make_dataset(tmp_path / "ds", 48, 8)  # 6 shards
    with S3Server() as server, FaultProxy(server.endpoint, one_slow_down) as proxy:
        server.upload(local, "metrics", "ds")
        point_aws_at(proxy.endpoint, monkeypatch, tmp_path / "index-cache")
        reset_session()
        cache = ShardCacheConfig(tmp_path / "shards", "1GB", prefetch=0)

        def one_pass() -> dict[str, float]:
            dataset = get_val_dataset(
                "s3://metrics/ds",
                worker_config=WorkerConfig(rank=0, world_size=1, num_workers=2),
                batch_size=8,
                split_part="train",
                shard_cache=cache,
            )
            loader = get_savable_loader(dataset, stats=True)
            try:
                assert sum(len(b.__key__) for b in loader) == 48
                return loader.metrics()
            finally:
                loader.close()

        try:
            cold, warm = one_pass(), one_pass()
        finally:
            reset_session()
    assert slowed and cold["loader/remote/retries"] == 1 and warm["loader/remote/retries"] == 0
    assert cold["loader/cache/misses"] == 6 and cold["loader/cache/hits"] == 0
    assert cold["loader/remote/bytes"] > 0 and cold["loader/remote/requests"] >= 6
    assert warm["loader/cache/hits"] >= 6 and warm["loader/cache/misses"] == 0
    assert warm["loader/remote/bytes"] < cold["loader/remote/bytes"]
