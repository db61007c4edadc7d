"""The node-local shard cache against a real moto S3 server on 127.0.0.1, with a counting
proxy in front of it (``FaultProxy.log``: every request, its path and the bytes answered).

What is checked: a warm epoch sends no GET for shard data; 4 processes sharing one folder
fetch each object once; a corrupt or deleted entry is fetched again and no sample is lost;
an object replaced under the same key (new ETag) is never served from the cache; the folder
stays within its limit; a run resumed mid-epoch with the cache on gives the same batches.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from conftest import installed_or_skip, make_dataset

from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset, get_val_dataset
from energon_lite.errors import ConfigError, DatasetFormatError
from energon_lite.storage import cache_config, reset_session
from energon_lite.storage.cache_config import ShardCacheConfig, parse_size
from energon_lite.synth.servers import TEST_CREDENTIALS, FaultProxy, S3Server
from energon_lite.testing import assert_loader_resumes

installed_or_skip("moto", "s3fs")

BUCKET = "cached"


@pytest.fixture(scope="module")
def s3() -> S3Server:
    with S3Server() as server:
        yield server


@pytest.fixture(scope="module")
def proxy(s3: S3Server) -> FaultProxy:
    with FaultProxy(s3.endpoint) as counting:
        yield counting


@pytest.fixture(scope="module")
def local_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """120 samples in 6 shards of 20."""
    return make_dataset(tmp_path_factory.mktemp("cache_local") / "ds")


@pytest.fixture
def env(proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """AWS variables pointing at the counting proxy; a fresh cache folder, limit 1 GB."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", TEST_CREDENTIALS["key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", TEST_CREDENTIALS["secret"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("ENERGON_LITE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ENERGON_LITE_CACHE_LIMIT", "1GB")
    yield tmp_path / "cache" / "shards"
    reset_session()  # nothing read or chosen carries into the next test


def _upload(s3: S3Server, local: Path, prefix: str) -> str:
    s3.upload(local, BUCKET, prefix)
    return f"s3://{BUCKET}/{prefix}"


def _shard_gets(proxy: FaultProxy, since: int) -> dict[str, int]:
    """GETs of shard data (``*.tar``, not indexes or metadata) per object since ``since``."""
    counts: dict[str, int] = {}
    for method, path, _, _ in proxy.log[since:]:
        name = path.split("?", 1)[0]
        if method == "GET" and name.endswith(".tar"):
            counts[name] = counts.get(name, 0) + 1
    return counts


def _val_keys(path: str | Path, num_workers: int = 0, **kwargs) -> list[str]:
    wc = WorkerConfig(rank=0, world_size=1, num_workers=num_workers)
    loader = get_savable_loader(
        get_val_dataset(path, worker_config=wc, batch_size=8, split_part="train", **kwargs)
    )
    return [key for batch in loader for key in batch.__key__]


def _captions(path: str | Path) -> list[str]:
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    loader = get_savable_loader(
        get_val_dataset(path, worker_config=wc, batch_size=8, split_part="train")
    )
    return [c for batch in loader for c in batch.caption]


def test_warm_epoch_sends_no_get_for_shard_data(s3, proxy, local_ds, env):
    url = _upload(s3, local_ds, "warm")
    expected = _val_keys(local_ds, num_workers=2)
    start = len(proxy.log)
    assert _val_keys(url, num_workers=2) == expected
    cold = _shard_gets(proxy, start)
    assert len(cold) == 6 and all(n == 1 for n in cold.values())  # one GET per small shard
    assert len(list(env.glob("*.data"))) == 6
    start = len(proxy.log)
    assert _val_keys(url, num_workers=2) == expected
    assert _shard_gets(proxy, start) == {}


def _read_all(url: str, out: multiprocessing.Queue) -> None:
    out.put(_val_keys(url))


def test_four_processes_sharing_one_cache_fetch_each_object_once(s3, proxy, local_ds, env):
    url = _upload(s3, local_ds, "shared")
    start = len(proxy.log)
    ctx = multiprocessing.get_context("fork")
    out: multiprocessing.Queue = ctx.Queue()
    workers = [ctx.Process(target=_read_all, args=(url, out)) for _ in range(4)]
    for p in workers:
        p.start()
    results = [out.get(timeout=120) for _ in workers]
    for p in workers:
        p.join(timeout=60)
        assert p.exitcode == 0
    expected = _val_keys(local_ds)
    assert all(keys == expected for keys in results)
    gets = _shard_gets(proxy, start)
    assert len(gets) == 6 and all(n == 1 for n in gets.values()), gets


def test_corrupt_and_deleted_entries_are_fetched_again(s3, proxy, local_ds, env):
    url = _upload(s3, local_ds, "damaged")
    expected = _val_keys(local_ds)
    assert _val_keys(url) == expected
    entries = sorted(env.glob("*.data"))
    corrupt, deleted = entries[0], entries[1]
    data = bytearray(corrupt.read_bytes())
    data[len(data) // 2] ^= 0xFF
    corrupt.write_bytes(bytes(data))
    deleted.unlink()
    start = len(proxy.log)
    assert _val_keys(url) == expected  # every sample, from good bytes
    assert sum(_shard_gets(proxy, start).values()) == 2
    assert len(list(env.glob("*.data"))) == 6
    start = len(proxy.log)
    assert _val_keys(url) == expected
    assert _shard_gets(proxy, start) == {}


def _same_size_new_caption(shard: Path, out: Path) -> str:
    """A copy of ``shard`` with a middle sample's caption changed in its first letter (same
    size, so the index still describes it, and first and last samples as prepare probed
    them); returns the new caption."""
    with tarfile.open(shard) as tar:
        captions = [m for m in tar.getmembers() if m.name.endswith(".txt")]
    member = captions[len(captions) // 2]
    data = bytearray(shard.read_bytes())
    old = data[member.offset_data]
    data[member.offset_data] = ord("Z") if old != ord("Z") else ord("Y")
    out.write_bytes(bytes(data))
    return data[member.offset_data : member.offset_data + member.size].decode()


def test_changed_object_is_not_served_from_the_cache(s3, proxy, local_ds, env, tmp_path):
    url = _upload(s3, local_ds, "changing")
    before = _captions(url)
    shard = sorted(local_ds.glob("**/*.tar"))[0]
    key = f"changing/{shard.relative_to(local_ds).as_posix()}"
    changed = tmp_path / "changed.tar"
    new_caption = _same_size_new_caption(shard, changed)
    s3.client().upload_file(str(changed), BUCKET, key)  # same key and size, new ETag
    start = len(proxy.log)
    # the old entry is never served: the changed object is fetched, and since its bytes are
    # not those prepare indexed (a caption edited in place), its whole-shard CRC-32 refuses it
    with pytest.raises(DatasetFormatError, match=rf"{shard.name}: shard changed since prepare"):
        _captions(url)
    assert new_caption not in before
    assert set(_shard_gets(proxy, start)) == {f"/{BUCKET}/{key}"}  # only the changed object


def test_the_folder_stays_within_its_limit(s3, proxy, local_ds, env, monkeypatch):
    url = _upload(s3, local_ds, "evicting")
    sizes = sorted(p.stat().st_size for p in local_ds.glob("**/*.tar"))
    limit = sum(sizes) // 2
    monkeypatch.setenv("ENERGON_LITE_CACHE_LIMIT", str(limit))
    expected = _val_keys(local_ds)
    for _ in range(2):
        start = len(proxy.log)
        assert _val_keys(url) == expected
        used = sum(p.stat().st_size for p in env.glob("*.data"))
        assert 0 < used <= limit
        assert len(list(env.glob("*.data"))) < 6
        assert sum(_shard_gets(proxy, start).values()) >= 6 - len(list(env.glob("*.data")))


def test_resume_mid_epoch_with_the_cache_on(s3, local_ds, env):
    url = _upload(s3, local_ds, "resuming")

    def make_loader():
        wc = WorkerConfig(rank=0, world_size=1, num_workers=2)
        ds = get_train_dataset(
            url, worker_config=wc, batch_size=4, shuffle_buffer_size=10, max_samples_per_sequence=5
        )
        return get_savable_loader(ds)

    assert_loader_resumes(make_loader, total=24, save_points=[0, 7, 13])
    assert len(list(env.glob("*.data"))) == 6


def test_cache_from_the_loader_api(s3, proxy, local_ds, env, monkeypatch, tmp_path):
    monkeypatch.delenv("ENERGON_LITE_CACHE_LIMIT")
    url = _upload(s3, local_ds, "api")
    folder = tmp_path / "api-cache"
    config = ShardCacheConfig(folder, "100MB")
    expected = _val_keys(local_ds, num_workers=2)
    start = len(proxy.log)
    assert _val_keys(url, num_workers=2, shard_cache=config) == expected
    assert len(list(folder.glob("*.data"))) == 6 and not env.exists()
    assert sum(_shard_gets(proxy, start).values()) == 6
    start = len(proxy.log)
    assert _val_keys(url, num_workers=2, shard_cache=config) == expected
    assert _shard_gets(proxy, start) == {}


def test_sizes_and_bad_settings_are_named(env, monkeypatch, local_ds):
    assert parse_size("200GB", "x") == 200 * 10**9
    assert parse_size("1.5GiB", "x") == 3 << 29
    assert parse_size(4096, "x") == 4096
    monkeypatch.setenv("ENERGON_LITE_CACHE_LIMIT", "lots")
    with pytest.raises(ConfigError, match="ENERGON_LITE_CACHE_LIMIT='lots'"):
        cache_config.current()
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    with pytest.raises(ConfigError, match="shard cache limit='-3'"):
        get_val_dataset(local_ds, worker_config=wc, batch_size=2,
                        shard_cache=ShardCacheConfig("/tmp", "-3"))  # fmt: skip


def test_the_run_says_once_where_its_cache_is_and_local_data_skips_it(s3, local_ds, env, caplog):
    url = _upload(s3, local_ds, "announced")
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    with caplog.at_level("INFO", logger="energon_lite.storage"):
        for _ in range(2):
            get_val_dataset(url, worker_config=wc, batch_size=8, split_part="train")
    said = [
        r.getMessage() for r in caplog.records if "remote shards are cached in" in r.getMessage()
    ]
    assert said == [f"remote shards are cached in {env} (at most 1000000000 bytes)"]
    assert _val_keys(local_ds) and not env.exists()  # a local dataset is read in place


# who may write the cache, and what happens under it ---------------------------------------


def _entry_of(url: str, shard: str, env: Path):
    """(the object's RemotePath, version, size, the ShardCache in ``env``) for one shard."""
    from energon_lite.storage import as_path, ops
    from energon_lite.storage.shard_cache import ShardCache

    path = as_path(f"{url}/{shard}")
    version, size = ops.stat(path)
    return path, version, size, ShardCache(env, 1 << 30)


@pytest.mark.skipif(os.getuid() != 0, reason="making a folder another user owns needs root")
def test_a_cache_folder_another_user_made_or_may_write_is_refused(s3, local_ds, env):
    """A local user who made ``shards/`` (mode 0777) before the run could plant entries with
    recomputed checksums (6 of 120 captions were the attacker's); such a folder is refused,
    as the cache pool refuses one, naming it and the owner or the mode."""
    url = _upload(s3, local_ds, "planted")
    env.mkdir(parents=True)
    os.chmod(env, 0o777)
    os.chown(env, 54321, 54321)
    with pytest.raises(ConfigError, match=rf"cache folder {env} is owned by uid 54321"):
        _val_keys(url)
    os.chown(env, 0, 0)  # ours, but others may write to it
    with pytest.raises(ConfigError, match=rf"cache folder {env} has mode 0777.*chmod 700"):
        _val_keys(url)
    os.chmod(env, 0o700)
    assert _val_keys(url) == _val_keys(local_ds)


def test_links_planted_at_temporary_names_are_never_written_through(s3, local_ds, env, tmp_path):
    """A symlink at ``<id>.data.tmp-<pid>`` made a root run truncate the file it points at
    (O_CREAT | O_TRUNC); temporaries are now created with O_EXCL | O_NOFOLLOW after the
    name is cleared, so the target keeps its bytes and the entry is whole."""
    url = _upload(s3, local_ds, "linked")
    path, version, size, cache = _entry_of(url, "parts/data-0.tar", env)
    data, crc, _ = cache._paths(path, version, size)
    victim = tmp_path / "victim"
    victim.write_bytes(b"root-only bytes")
    os.chmod(victim, 0o600)
    env.mkdir(parents=True, mode=0o700)
    for name in (f"{data.name}.tmp-{os.getpid()}", f"{crc.name}.tmp-{os.getpid()}"):
        (env / name).symlink_to(victim)
    entry = cache.open(path, version, size)
    assert entry is not None
    try:
        assert entry.pread(size, 0) == (local_ds / "parts/data-0.tar").read_bytes()
    finally:
        entry.close()
    assert victim.read_bytes() == b"root-only bytes"
    assert not any(p.is_symlink() for p in env.iterdir())


def test_a_cache_folder_deleted_during_a_fetch_is_made_again(s3, local_ds, env, monkeypatch):
    """The node's clean-up removed the cache folder while a shard was fetched: the run
    stopped with a raw FileNotFoundError from os.replace. It now makes the folder again
    and fetches once more; every sample is read."""
    url = _upload(s3, local_ds, "vanishing")
    deleted = []

    def delete_once(number: int, request: str) -> None:
        if not deleted and request.split("?", 1)[0].endswith(".tar") and env.is_dir():
            shutil.rmtree(env)  # while the shard's GET is answered: mid-fetch
            deleted.append(request)

    with FaultProxy(s3.endpoint, schedule=delete_once) as vanishing:
        monkeypatch.setenv("AWS_ENDPOINT_URL", vanishing.endpoint)
        assert _val_keys(url) == _val_keys(local_ds)
    assert deleted and len(list(env.glob("*.data"))) == 6


def _fetch_first(env: Path, limit: int, url: str, done: multiprocessing.Queue) -> None:
    from energon_lite.storage.shard_cache import ShardCache

    path, version, size, _ = _entry_of(url, "parts/data-0.tar", env)
    entry = ShardCache(env, limit).open(path, version, size)
    done.put(entry is not None)


def test_fetches_in_flight_count_against_the_limit(s3, local_ds, env, monkeypatch):
    """4 processes with a 250 KB limit left 327,680 bytes: a fetch did not count the others
    in flight. While another process's fetch is in flight (the proxy holds its GET until the
    test releases it, a condition, not a timing), a second object that would not fit beside
    it is read without the cache, and the folder stays in its limit."""
    import threading

    from energon_lite.storage.shard_cache import ShardCache

    url = _upload(s3, local_ds, "inflight")
    released = threading.Event()

    def hold_the_first(number: int, request: str) -> None:
        if request.split("?", 1)[0].endswith("data-0.tar") and "HEAD" not in request:
            released.wait(300)  # a hang guard only: the test sets it

    with FaultProxy(s3.endpoint, schedule=hold_the_first) as holding:
        monkeypatch.setenv("AWS_ENDPOINT_URL", holding.endpoint)
        _, _, size, _ = _entry_of(url, "parts/data-0.tar", env)
        second, version2, size2, _ = _entry_of(url, "parts/data-1.tar", env)
        limit = size + size2 - 1  # both together do not fit
        ctx = multiprocessing.get_context("spawn")
        done: multiprocessing.Queue = ctx.Queue()
        other = ctx.Process(target=_fetch_first, args=(env, limit, url, done))
        other.start()
        try:
            for _ in range(3000):  # until the other process's fetch is in flight (bounded)
                if env.is_dir() and any(".tmp-" in p.name for p in env.glob("*.data.tmp-*")):
                    break
                other.join(0.1)
            assert any(env.glob("*.data.tmp-*")), "the other process never started its fetch"
            assert ShardCache(env, limit).open(second, version2, size2) is None
        finally:
            released.set()
        assert done.get(timeout=300) is True
        other.join(300)
    used = sum(p.stat().st_size for p in env.iterdir() if p.is_file())
    assert used <= limit and len(list(env.glob("*.data"))) == 1


def test_a_shard_edited_after_prepare_is_refused_when_the_cache_fills(s3, local_ds, env, tmp_path):
    """A copy whose shard was edited in place (same size) after prepare: the open's checks
    pass (no versions were recorded by a local prepare), but filling the cache reads the
    whole object, and its CRC-32 is not the one prepare recorded: refused, naming it."""
    import tarfile

    copy = tmp_path / "edited"
    shutil.copytree(local_ds, copy)
    shard = copy / "parts/data-2.tar"
    with tarfile.open(shard) as tar:
        member = tar.getmember(tar.getnames()[7])
    data = bytearray(shard.read_bytes())
    data[member.offset_data + 4] ^= 0xFF
    shard.write_bytes(bytes(data))
    url = _upload(s3, copy, "edited")
    with pytest.raises(
        DatasetFormatError, match=r"data-2\.tar: shard changed since prepare: the CRC-32"
    ):
        _val_keys(url)


def test_a_cache_folder_without_a_limit_says_the_cache_is_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("ENERGON_LITE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(cache_config.LIMIT_ENV, raising=False)
    reset_session()  # a process that has not told it yet
    with caplog.at_level("WARNING", logger="energon_lite.storage"):
        assert cache_config.from_environment() is None
        assert cache_config.from_environment() is None  # said once
    told = [
        r.getMessage()
        for r in caplog.records
        if "ENERGON_LITE_CACHE_LIMIT is not" in r.getMessage()
    ]
    assert len(told) == 1 and str(tmp_path / "cache" / "shards") in told[0]
