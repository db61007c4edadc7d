"""FileStoreCachePool: byte limit, eviction, pins, one fetch per file across processes."""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path
from typing import Any

import pytest

from energon_lite.cache import (
    CacheFileLazy,
    DirectLazy,
    FileCacheLazy,
    FileStoreCachePool,
    MockLazy,
    NoCachePool,
    SystemFileStore,
)
from energon_lite.epathlib import EPath
from energon_lite.errors import ConfigError
from energon_lite.samples.types import SourceInfo


class LoggingStore(SystemFileStore):
    """A real folder store that appends one line to ``fetch.log`` per read from the folder."""

    def __init__(self, base_dir: Path, log: Path) -> None:
        super().__init__(base_dir)
        self.log = log

    def __getitem__(self, name: str) -> tuple[bytes, SourceInfo]:
        with open(self.log, "a") as file:
            file.write(f"{os.getpid()} {name}\n")
        return super().__getitem__(name)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    folder = tmp_path / "files"
    folder.mkdir()
    for i in range(12):
        (folder / f"f{i}.bin").write_bytes(bytes([i]) * 30_000)
    return folder


def _cached_bytes(pool: FileStoreCachePool) -> int:
    return sum(p.stat().st_size for p in pool.cache_dir.glob("*.bin"))


def _fetches(log: Path) -> list[str]:
    return log.read_text().split("\n")[:-1] if log.exists() else []


def test_get_reads_through_and_records_the_source(files: Path, tmp_path: Path) -> None:
    log = tmp_path / "fetch.log"
    store = LoggingStore(files, log)
    pool = FileStoreCachePool(parent_cache_dir=tmp_path / "cache", num_workers=2)
    sample: dict[str, Any] = {"__key__": "x"}
    assert pool.get(store, "f3.bin", sample) == bytes([3]) * 30_000
    assert pool.get(store, "f3.bin") == bytes([3]) * 30_000  # second time from the cache
    assert len(_fetches(log)) == 1
    assert sample["__sources__"] == (
        SourceInfo(
            dataset_path=EPath(files), index="f3.bin", shard_name=str(files), file_names=("f3.bin",)
        ),
    )
    pool.close()


def test_never_exceeds_its_limit_and_evicts_least_recently_used(
    files: Path, tmp_path: Path
) -> None:
    log = tmp_path / "fetch.log"
    store = LoggingStore(files, log)
    limit = 100_000
    pool = FileStoreCachePool(
        parent_cache_dir=tmp_path / "cache", max_cache_size_gbytes=limit / 1024**3
    )
    for _ in range(2):
        for i in range(12):
            assert pool.get(store, f"f{i}.bin") == bytes([i]) * 30_000
            assert _cached_bytes(pool) <= limit
            used, count = pool.usage()
            assert used <= limit and count <= 3
            assert used == _cached_bytes(pool)
    assert len(_fetches(log)) == 24  # 3 of 12 fit: a cycle evicts each before it comes back
    pool.get(store, "f11.bin")
    assert len(_fetches(log)) == 24  # the most recent ones stayed
    count_pool = FileStoreCachePool(parent_cache_dir=tmp_path / "cache2", max_cache_count=2)
    for i in range(5):
        count_pool.get(store, f"f{i}.bin")
        assert len(list(count_pool.cache_dir.glob("*.bin"))) <= 2
    pool.close()
    count_pool.close()


def test_too_large_is_handed_over_uncached(files: Path, tmp_path: Path) -> None:
    pool = FileStoreCachePool(parent_cache_dir=tmp_path / "c", max_cache_size_gbytes=1e-6)
    assert pool.get(SystemFileStore(files), "f1.bin") == bytes([1]) * 30_000
    assert _cached_bytes(pool) == 0 and pool.usage() == (0, 0)


def test_pinned_entries_are_not_evicted(files: Path, tmp_path: Path) -> None:
    log = tmp_path / "fetch.log"
    store = LoggingStore(files, log)
    pool = FileStoreCachePool(
        parent_cache_dir=tmp_path / "cache", max_cache_size_gbytes=70_000 / 1024**3
    )
    held = pool.get_lazy(store, "f0.bin")
    assert isinstance(held, FileCacheLazy)
    held.entry.send_to_cache_future.result()  # prefetched into the cache, and pinned
    for i in range(1, 6):
        assert pool.get(store, f"f{i}.bin") == bytes([i]) * 30_000
        assert _cached_bytes(pool) <= 70_000
    assert held.get() == bytes([0]) * 30_000
    assert _fetches(log).count(f"{os.getpid()} f0.bin") == 1  # read from the cache, not again
    pool.close()


def test_shared_references_in_one_process(files: Path, tmp_path: Path) -> None:
    log = tmp_path / "fetch.log"
    store = LoggingStore(files, log)
    pool = FileStoreCachePool(parent_cache_dir=tmp_path / "cache")
    first, second = pool.get_lazy(store, "f5.bin"), pool.get_lazy(store, "f5.bin")
    assert first.entry is second.entry and first.entry.refcount == 2
    assert first.get() == second.get() == bytes([5]) * 30_000
    assert len(_fetches(log)) == 1
    assert first == second and len({first, second}) == 1
    pool.close()


def test_a_lazy_waits_and_releases_through_the_pools_public_interface(
    files: Path, tmp_path: Path
) -> None:
    """``FileCacheLazy`` needs two things of its pool, ``wait`` and ``release``: public."""
    store = SystemFileStore(files)
    pool = FileStoreCachePool(parent_cache_dir=tmp_path / "cache")
    kept, dropped = pool.get_lazy(store, "f2.bin"), pool.get_lazy(store, "f2.bin")
    entry = kept.entry
    assert entry.refcount == 2
    pool.release(dropped.entry)  # what an unread Lazy does when it goes
    dropped._data = (None, None)  # ...so that its own __del__ does not release it again
    assert entry.refcount == 1
    data, source = pool.wait(store, "f2.bin", entry)
    assert data == bytes([2]) * 30_000 and source.file_names == ("f2.bin",)
    assert entry.refcount == 0  # waiting took the last reference
    kept._data = (data, source)
    pool.close()


def _worker(pool: FileStoreCachePool, store: LoggingStore, barrier: Any, out: Any) -> None:
    barrier.wait(timeout=30)
    data = [pool.get(store, name) for name in ("f7.bin", "f8.bin", "f7.bin")]
    lazy = pool.get_lazy(store, "f9.bin")
    out.put([len(d) for d in data] + [len(lazy.get())])
    pool.close()


def test_two_worker_processes_fetch_a_file_once(files: Path, tmp_path: Path) -> None:
    log = tmp_path / "fetch.log"
    store = LoggingStore(files, log)
    pool = FileStoreCachePool(parent_cache_dir=tmp_path / "cache", num_workers=2)
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(pool, store, barrier, out)) for _ in range(2)]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    assert results == [[30_000] * 4] * 2
    names = sorted(line.split()[1] for line in _fetches(log))
    assert names == ["f7.bin", "f8.bin", "f9.bin"]  # each fetched by one of the two processes


def test_to_cache_and_the_simple_lazies(files: Path, tmp_path: Path) -> None:
    pool = FileStoreCachePool(parent_cache_dir=tmp_path / "cache")
    lazy = pool.to_cache({"a": [1, 2]}, "obj")
    assert (
        isinstance(lazy, CacheFileLazy) and lazy.cache_path is not None and lazy.cache_path.exists()
    )
    path = lazy.cache_path
    assert lazy.get() == {"a": [1, 2]} and not path.exists()
    none = NoCachePool()
    direct = none.get_lazy(SystemFileStore(files), "f2.bin")
    assert isinstance(direct, DirectLazy)
    sample: dict[str, Any] = {}
    assert direct.get(sample) == bytes([2]) * 30_000 and len(sample["__sources__"]) == 1
    assert none.to_cache(5, "five").get() == 5
    mock = MockLazy("x.txt", lambda name: name.upper())
    assert mock.get() == "X.TXT"
    with pytest.raises(ConfigError, match="method"):
        FileStoreCachePool(parent_cache_dir=tmp_path, method="zip")  # type: ignore[arg-type]
    pool.close()


class _Planted:
    """A pickle that creates a folder when unpickled (stands for any code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.marker),))


def test_a_planted_pickle_in_the_cache_never_runs(files: Path, tmp_path: Path) -> None:
    import pickle

    store = SystemFileStore(files)
    pool = FileStoreCachePool(parent_cache_dir=tmp_path / "cache", num_workers=1)
    marker = tmp_path / "planted-code-ran"
    name = pool._entry_name(store, "f2.bin")  # computable by anyone from the path and name
    planted = pickle.dumps((_Planted(marker), None))
    (pool.cache_dir / f"{name}.bin").write_bytes(planted)
    assert pool.get(store, "f2.bin") == bytes([2]) * 30_000  # read from the store instead
    assert not marker.exists()
    # what the pool writes itself is plain bytes behind a JSON header, no pickle opcodes
    pool.get(store, "f5.bin")
    blob = (pool.cache_dir / f"{pool._entry_name(store, 'f5.bin')}.bin").read_bytes()
    assert blob.startswith(b"ELCACHE1") and blob.endswith(bytes([5]) * 30_000)
    assert b'"file_names": ["f5.bin"]' in blob
    # to_cache writes plain data as msgpack, and keeps everything else in memory
    plain = pool.to_cache({"a": [1, 2], "b": b"x"}, "plain")
    assert isinstance(plain, CacheFileLazy) and plain.get() == {"a": [1, 2], "b": b"x"}
    obj = pool.to_cache(_Planted(marker), "object")
    assert isinstance(obj, MockLazy) and isinstance(obj.get(), _Planted)
    assert not list(pool.cache_dir.glob("*.pkl"))


def test_the_default_folder_is_private_and_a_shared_one_is_refused(
    files: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    pool = FileStoreCachePool(num_workers=1)
    root = tmp_path / "energon_lite_cache"
    assert pool.cache_dir == root / "data"
    for folder in (root, root / "data", root / "locks", root / "tmp"):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    pool.close()

    os.chmod(root, 0o777)  # a folder others may write to: they could plant entries
    with pytest.raises(ConfigError, match=rf"cache folder {root} has mode 0777.*chmod 700"):
        FileStoreCachePool(num_workers=1)
    os.chmod(root, 0o700)
    os.chmod(root / "data", 0o777)
    with pytest.raises(ConfigError, match=rf"cache folder {root / 'data'} has mode 0777"):
        FileStoreCachePool(num_workers=1)
    os.chmod(root / "data", 0o700)
    FileStoreCachePool(num_workers=1).close()


@pytest.mark.skipif(os.getuid() != 0, reason="giving a folder to another user needs root")
def test_a_cache_folder_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "energon_lite_cache"
    root.mkdir(mode=0o700)
    os.chown(root, 54321, -1)
    with pytest.raises(ConfigError, match=rf"cache folder {root} is owned by uid 54321"):
        FileStoreCachePool(parent_cache_dir=tmp_path, num_workers=1)


def test_the_cache_folder_deleted_mid_run_is_made_again(files: Path, tmp_path: Path) -> None:
    """A tmp cleaner removes the folder under a running pool: every file still comes back
    (before: FileNotFoundError for each, and the loader skipped 151 of 200 samples)."""
    import shutil

    log = tmp_path / "fetch.log"
    store = LoggingStore(files, log)
    pool = FileStoreCachePool(parent_cache_dir=tmp_path / "cache", num_workers=2)
    for i in range(4):
        assert pool.get(store, f"f{i}.bin") == bytes([i]) * 30_000
    shutil.rmtree(tmp_path / "cache" / "energon_lite_cache")
    for i in range(12):
        assert pool.get(store, f"f{i}.bin") == bytes([i]) * 30_000
    assert pool.to_cache({"a": 1}, "obj").get() == {"a": 1}
    assert _cached_bytes(pool) > 0  # the folders are back and cache again
    assert os.stat(pool.cache_dir.parent).st_mode & 0o777 == 0o700
    assert pool.get(store, "f11.bin") == bytes([11]) * 30_000
    assert _fetches(log).count(f"{os.getpid()} f11.bin") == 1  # cached again after the loss
    pool.close()


def test_a_full_cache_disk_reads_around_itself(
    files: Path, tmp_path: Path, small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """12 files of 30 KB on a 256 KiB disk, under a 1 TB limit: the writes past the disk
    fail. Every file still comes back, no temp file is left to keep the disk full, and one
    warning says so (before: OSError ENOSPC per file, and orphaned .tmp files)."""
    import logging

    store = LoggingStore(files, tmp_path / "fetch.log")
    pool = FileStoreCachePool(parent_cache_dir=small_disk, num_workers=2)
    big = {"blob": b"x" * 300_000}  # to_cache of more than the disk holds
    with caplog.at_level(logging.WARNING, logger="energon_lite.cache.pool"):
        for _ in range(2):
            for i in range(12):
                assert pool.get(store, f"f{i}.bin") == bytes([i]) * 30_000
        assert pool.to_cache(big, "big").get() == big
    assert list(pool._tmp.iterdir()) == []  # no orphaned temp files
    assert 0 < _cached_bytes(pool) <= 256 * 1024
    warnings = [r for r in caplog.records if "reading around it" in r.getMessage()]
    assert len(warnings) == 1 and "No space left on device" in warnings[0].getMessage()
    pool.close()


class UnindexedStore(SystemFileStore):
    """A folder store whose files are not samples: their source has no index and no shard
    (Energon's stores say None for such files); ``named`` gives its path as a string, as a
    store of your own may."""

    named: str | None = None

    def __getitem__(self, name: str) -> tuple[bytes, SourceInfo]:
        data, source = super().__getitem__(name)
        return data, SourceInfo(
            dataset_path=source.dataset_path if self.named is None else self.named,
            index=None,
            shard_name=None,
            file_names=source.file_names,
        )


def test_a_source_without_index_and_tuples_come_back_from_the_cache_as_they_went_in(
    files: Path, tmp_path: Path
) -> None:
    pool = FileStoreCachePool(parent_cache_dir=tmp_path / "cache")
    store = UnindexedStore(files)
    for _ in range(2):  # read through, then from the cache file
        sample: dict[str, Any] = {"__key__": "x"}
        assert pool.get(store, "f4.bin", sample) == bytes([4]) * 30_000
        assert sample["__sources__"][0].index is None
        assert sample["__sources__"][0].shard_name is None
    lazy = pool.to_cache((1, "some_data", (2, [3])), "tuple")
    assert isinstance(lazy, CacheFileLazy) and lazy.cache_path is not None
    assert lazy.get() == (1, "some_data", (2, [3])) and isinstance(lazy.get(), tuple)
    pool.close()


@pytest.mark.parametrize("named", [None, "mock_store"])
def test_a_sources_dataset_path_comes_back_from_the_cache_as_it_went_in(
    files: Path, tmp_path: Path, named: str | None
) -> None:
    """Energon's stores give an ``EPath``; a store of your own may give a string: both come
    back from the cache file as they were given."""
    pool = FileStoreCachePool(parent_cache_dir=tmp_path / "cache")
    store = UnindexedStore(files)
    store.named = named
    for _ in range(2):  # read through, then from the cache file
        sample: dict[str, Any] = {"__key__": "x"}
        pool.get(store, "f5.bin", sample)
        path = sample["__sources__"][0].dataset_path
        assert path == (EPath(files) if named is None else "mock_store")
        assert type(path) is (EPath if named is None else str)
    pool.close()
