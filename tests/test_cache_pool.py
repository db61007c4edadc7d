"""FileStoreCachePool: Energon's staging (waiting for room, deleted after the last reader),
private folders, and reading around a lost or full cache folder."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
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


def _fetches(log: Path) -> list[str]:
    return log.read_text().split("\n")[:-1] if log.exists() else []


def test_get_reads_directly_and_records_the_source(files: Path, tmp_path: Path) -> None:
    """``get`` reads from the store each time, as Energon's does: the cache stages lazy
    references only."""
    log = tmp_path / "fetch.log"
    store = LoggingStore(files, log)
    pool = FileStoreCachePool(parent_cache_dir=tmp_path / "cache", num_workers=2)
    sample: dict[str, Any] = {"__key__": "x"}
    assert pool.get(store, "f3.bin", sample) == bytes([3]) * 30_000
    assert pool.get(store, "f3.bin") == bytes([3]) * 30_000
    assert len(_fetches(log)) == 2 and list(pool.cache_dir.glob("*")) == []
    assert sample["__sources__"] == (
        SourceInfo(
            dataset_path=EPath(files), index="f3.bin", shard_name=str(files), file_names=("f3.bin",)
        ),
    )
    pool.close()


def _blocked(pool: Any) -> None:
    """Until the pool's one thread waits for room (bounded: 10 s)."""
    for _ in range(1000):
        if len(pool._cache_space_available._waiters) == 1:
            return
        time.sleep(0.01)
    raise AssertionError("the prefetch thread never waited for room")


def _staging_trace(pool_type: type, store: Any, parent: Path) -> list[Any]:
    """What a pool of 75 KB and 2 files, with one thread, shows at each step of a run of
    lazy references: each reference's (refcount, state), the bytes and files staged, and
    the files in its folder."""
    pool = pool_type(parent_cache_dir=parent, max_cache_count=2, num_workers=1)
    pool.max_cache_size = 75_000
    try:
        a, b, b2, c, d = (pool.get_lazy(store, name) for name in ("a", "b", "b", "c", "d"))
        lazies = {"a": a, "b": b, "b2": b2, "c": c, "d": d}
        trace: list[Any] = []

        def step() -> None:
            states = {
                name: (
                    lazy.entry.refcount,
                    "consumed"
                    if lazy._data is not None
                    else ("cached" if lazy.entry.send_to_cache_future.done() else "pending"),
                )
                for name, lazy in lazies.items()
            }
            files = len([p for p in pool.cache_dir.glob("*") if p.is_file()])
            trace.append((states, pool.current_cache_size, pool.current_cache_count, files))

        a.entry.send_to_cache_future.result(timeout=10)
        _blocked(pool)  # b does not fit beside a: its prefetch waits
        step()
        assert b2.get() == b"b" * 50_000  # read directly; b queued again behind c and d
        _blocked(pool)  # c waits now
        step()
        assert a.get() == b"a" * 50_000  # a's file goes: c and d fit, b waits again
        d.entry.send_to_cache_future.result(timeout=10)
        _blocked(pool)
        step()
        assert c.get() == b"c" * 50_000 and d.get() == b"d" * 25_000
        b.entry.send_to_cache_future.result(timeout=10)
        step()
        assert b.get() == b"b" * 50_000
        step()
        return trace
    finally:
        pool.close()


def test_staging_waits_for_room_and_deletes_after_the_last_reader_as_energon(
    tmp_path: Path,
) -> None:
    """Energon's staging, step by step, with megatron-energon as the oracle (before: the
    pool evicted least recently used files and kept read ones, and had no
    ``current_cache_size``)."""
    folder = tmp_path / "files"
    folder.mkdir()
    for name, size in (("a", 50_000), ("b", 50_000), ("c", 50_000), ("d", 25_000)):
        (folder / name).write_bytes(name.encode() * size)
    ours = _staging_trace(FileStoreCachePool, UnindexedStore(folder), tmp_path / "ours")
    p, c, s = "pending", "cached", "consumed"
    assert ours == [
        ({"a": (1, c), "b": (2, p), "b2": (2, p), "c": (1, p), "d": (1, p)}, 50_000, 1, 1),
        ({"a": (1, c), "b": (1, p), "b2": (1, s), "c": (1, p), "d": (1, p)}, 50_000, 1, 1),
        ({"a": (0, s), "b": (1, p), "b2": (1, s), "c": (1, c), "d": (1, c)}, 75_000, 2, 2),
        ({"a": (0, s), "b": (1, c), "b2": (1, s), "c": (0, s), "d": (0, s)}, 50_000, 1, 1),
        ({"a": (0, s), "b": (0, s), "b2": (0, s), "c": (0, s), "d": (0, s)}, 0, 0, 0),
    ]
    energon_cache = pytest.importorskip("megatron.energon.cache")
    theirs = _staging_trace(
        energon_cache.FileStoreCachePool, UnindexedStore(folder), tmp_path / "theirs"
    )
    assert theirs == ours


def test_a_file_larger_than_the_cache_is_read_directly(files: Path, tmp_path: Path) -> None:
    pool = FileStoreCachePool(parent_cache_dir=tmp_path / "c", max_cache_size_gbytes=1e-6)
    lazy = pool.get_lazy(SystemFileStore(files), "f1.bin")
    assert isinstance(lazy, FileCacheLazy)
    assert lazy.entry.send_to_cache_future.result() is False
    assert lazy.get() == bytes([1]) * 30_000
    assert list(pool.cache_dir.glob("*")) == [] and pool.usage() == (0, 0)
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


def _worker(pool: FileStoreCachePool, store: LoggingStore, out: Any) -> None:
    lazy = pool.get_lazy(store, "f9.bin")
    lazy.entry.send_to_cache_future.result(timeout=30)
    staged = len(list(pool.cache_dir.glob("*")))
    out.put((str(pool.cache_dir), staged, len(lazy.get()), len(list(pool.cache_dir.glob("*")))))
    pool.close()


def test_a_forked_worker_stages_into_a_folder_of_its_own(files: Path, tmp_path: Path) -> None:
    """As in Energon, each process has its own staging folder (no two processes share or
    delete each other's files)."""
    store = LoggingStore(files, tmp_path / "fetch.log")
    pool = FileStoreCachePool(parent_cache_dir=tmp_path / "cache", num_workers=2)
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(pool, store, out)) for _ in range(2)]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    folders = {folder for folder, *_ in results} | {str(pool.cache_dir)}
    assert len(folders) == 3  # the parent's and one per child
    assert [rest for _, *rest in results] == [[1, 30_000, 0]] * 2
    pool.close()


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


def test_nothing_in_the_cache_is_a_pickle(files: Path, tmp_path: Path) -> None:
    """``method="pickle"`` stages the file's raw bytes (decoded on read), and ``to_cache``
    writes plain data as msgpack and keeps anything else in memory: the folder never holds
    a pickle, so a file planted there cannot run code."""
    store = SystemFileStore(files)
    pool = FileStoreCachePool(parent_cache_dir=tmp_path / "cache", num_workers=1, method="pickle")
    marker = tmp_path / "planted-code-ran"
    lazy = pool.get_lazy(store, "f5.bin")
    assert lazy.entry.send_to_cache_future.result(timeout=30) is True
    (staged,) = pool.cache_dir.glob("*")
    assert staged.read_bytes() == bytes([5]) * 30_000
    assert lazy.get() == bytes([5]) * 30_000 and not staged.exists()
    plain = pool.to_cache({"a": [1, 2], "b": b"x"}, "plain")
    assert isinstance(plain, CacheFileLazy) and plain.get() == {"a": [1, 2], "b": b"x"}
    obj = pool.to_cache(_Planted(marker), "object")
    assert isinstance(obj, MockLazy) and isinstance(obj.get(), _Planted)
    assert list(pool.cache_dir.glob("*")) == [] and not marker.exists()
    pool.close()


def test_the_default_folder_is_private_and_a_shared_one_is_refused(
    files: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    pool = FileStoreCachePool(num_workers=1)
    root = tmp_path / "energon_lite_cache"
    assert pool.cache_dir.parent == root and not pool.cache_dir.exists()  # made on first use
    lazy = pool.get_lazy(SystemFileStore(files), "f1.bin")
    assert lazy.entry.send_to_cache_future.result(timeout=30) is True
    for folder in (root, pool.cache_dir):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    assert lazy.get() == bytes([1]) * 30_000
    assert not pool.cache_dir.exists()  # removed with its last file: none left per worker
    pool.close()

    os.chmod(root, 0o777)  # a folder others may write to: they could plant entries
    with pytest.raises(ConfigError, match=rf"cache folder {root} has mode 0777.*chmod 700"):
        FileStoreCachePool(num_workers=1)
    os.chmod(root, 0o700)
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

    store = LoggingStore(files, tmp_path / "fetch.log")
    pool = FileStoreCachePool(parent_cache_dir=tmp_path / "cache", num_workers=2)
    held = [pool.get_lazy(store, f"f{i}.bin") for i in range(4)]
    assert all(lazy.entry.send_to_cache_future.result(timeout=30) for lazy in held)
    shutil.rmtree(tmp_path / "cache" / "energon_lite_cache")
    for i, lazy in enumerate(held):  # staged files gone: read from the store
        assert lazy.get() == bytes([i]) * 30_000
    for i in range(12):
        lazy = pool.get_lazy(store, f"f{i}.bin")
        assert lazy.entry.send_to_cache_future.result(timeout=30) is True  # staged again
        assert lazy.get() == bytes([i]) * 30_000
    assert pool.to_cache({"a": 1}, "obj").get() == {"a": 1}
    assert os.stat(pool.cache_dir.parent).st_mode & 0o777 == 0o700
    assert pool.usage() == (0, 0) and list(pool.cache_dir.glob("*")) == []
    pool.close()


def test_a_full_cache_disk_reads_around_itself(
    files: Path, tmp_path: Path, small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """12 files of 30 KB held at once on a 256 KiB disk, under a 1 TB limit: the writes past
    the disk fail. Every file still comes back, no temp file is left to keep the disk full,
    and one warning says so (before: OSError ENOSPC per file, and orphaned .tmp files)."""
    import logging

    store = LoggingStore(files, tmp_path / "fetch.log")
    pool = FileStoreCachePool(parent_cache_dir=small_disk, num_workers=2)
    big = {"blob": b"x" * 300_000}  # to_cache of more than the disk holds
    with caplog.at_level(logging.WARNING, logger="energon_lite.cache.pool"):
        held = [pool.get_lazy(store, f"f{i}.bin") for i in range(12)]
        staged = [lazy.entry.send_to_cache_future.result(timeout=30) for lazy in held]
        assert 0 < staged.count(True) < 12
        assert [p for p in pool.cache_dir.glob("*") if p.name.endswith(".tmp")] == []
        for i, lazy in enumerate(held):
            assert lazy.get() == bytes([i]) * 30_000
        assert pool.to_cache(big, "big").get() == big
    assert list(pool.cache_dir.glob("*")) == [] and pool.usage() == (0, 0)
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
    for lazy in (pool.get_lazy(store, "f4.bin"), pool.get_lazy(store, "f4.bin")):
        sample: dict[str, Any] = {"__key__": "x"}
        assert lazy.entry.send_to_cache_future.result(timeout=30) is True  # from the cache
        assert lazy.get(sample) == bytes([4]) * 30_000
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
