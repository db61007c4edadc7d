"""The storage session: one object per process holds what the storage layer keeps (clients,
small files, listings, shard caches, counters). Two loaders of one process, each with its own
shard cache, read through their own; a forked child gets a fresh session (real ``os.fork``);
``reset_session()`` is the one call a test needs to start afresh.

Against a real moto S3 server on 127.0.0.1 behind the counting proxy (``s3_fixtures``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from conftest import installed_or_skip, make_dataset
from s3_fixtures import env, proxy, s3  # noqa: F401 (fixtures)

from energon_lite import WorkerConfig, get_savable_loader, get_val_dataset
from energon_lite.storage import (
    STATS,
    RemotePath,
    ShardCacheConfig,
    StorageSession,
    ops,
    reset_session,
    session,
)
from energon_lite.synth.servers import FaultProxy, S3Server

installed_or_skip("moto", "s3fs")

BUCKET = "sessions"


@pytest.fixture(scope="module")
def url(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> str:  # noqa: F811
    s3.upload(make_dataset(tmp_path_factory.mktemp("session") / "ds"), BUCKET, "ds")
    return f"s3://{BUCKET}/ds"


def _loader(url: str, cache: ShardCacheConfig):
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    dataset = get_val_dataset(
        url, worker_config=wc, batch_size=8, split_part="train", shard_cache=cache
    )
    return get_savable_loader(dataset)


def test_two_loaders_of_one_process_read_through_their_own_caches(url: str, tmp_path: Path):
    first = ShardCacheConfig(tmp_path / "first", "1GB", prefetch=0)
    second = ShardCacheConfig(tmp_path / "second", "1GB", prefetch=0)
    a, b = iter(_loader(url, first)), iter(_loader(url, second))
    keys_a: list[str] = []
    keys_b: list[str] = []
    for _ in range(15):  # interleaved: each chain runs between the other's batches
        keys_a += next(a).__key__
        keys_b += next(b).__key__
    assert sorted(keys_a) == sorted(keys_b) and len(set(keys_a)) == 120
    # each loader fetched the 6 shards into its own folder, none into the other's
    assert len(list((tmp_path / "first").glob("*.data"))) == 6
    assert len(list((tmp_path / "second").glob("*.data"))) == 6
    assert session().chosen is None  # nothing stays chosen once the chains are suspended


def test_a_forked_child_gets_a_fresh_session(url: str, proxy: FaultProxy) -> None:  # noqa: F811
    parent = session()
    info = RemotePath(f"{url}/.nv-meta/.info.json")
    data = ops.read_bytes(info)
    client = next(iter(parent.clients.values()))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what its session is, then leave without cleanup
        try:
            child = session()
            before = len(proxy.log)
            again = ops.read_bytes(info)  # carried over: no request
            verdict = [
                child is not parent,
                child.pid == os.getpid(),
                not child.clients,  # its own clients, opened on first use
                client in child.inherited,  # the parent's kept alive, never used
                again == data and len(proxy.log) == before,
                child.stats.requests == parent.stats.requests,
            ]
            os.write(write, bytes(int(v) for v in verdict))
        finally:
            os._exit(0)
    os.close(write)
    deadline = time.monotonic() + 60
    while not os.waitpid(pid, os.WNOHANG)[0]:
        assert time.monotonic() < deadline, "the forked child hung"
        time.sleep(0.05)
    verdict = os.read(read, 16)
    os.close(read)
    assert list(verdict) == [1] * 6
    assert session() is parent  # the parent keeps its own


def test_reset_session_is_the_one_call_that_starts_afresh(url: str, proxy: FaultProxy):  # noqa: F811
    info = RemotePath(f"{url}/.nv-meta/.info.json")
    ops.read_bytes(info)
    old = session()
    assert info in old.small and old.stats.requests > 0
    fresh = reset_session()
    assert isinstance(fresh, StorageSession) and session() is fresh is not old
    assert not fresh.small and not fresh.listings and not fresh.clients
    assert STATS.requests == 0  # the counters of the new session
    before = len(proxy.log)
    ops.read_bytes(info)
    assert len(proxy.log) > before and STATS.requests == 1  # read again, counted afresh
