"""A video-text table and its media read from a real moto S3 server on 127.0.0.1: the same
batches and states as the local copy, media through ranged GETs (retried, version-pinned)
and the node-local shard cache."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import s3_fixtures
from conftest import installed_or_skip

from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset
from energon_lite.errors import DatasetFormatError, TooManyFailuresError
from energon_lite.flavors.video_text import VideoTextTaskEncoder, prepare_video_text
from energon_lite.synth.servers import FaultProxy, S3Server
from energon_lite.synth.video_text import make_media, write_table
from energon_lite.testing import assert_loader_resumes, take

installed_or_skip("moto", "s3fs", "av")

# the moto server, the counting proxy and each test's environment (tests/s3_fixtures.py)
s3, proxy, env = s3_fixtures.s3, s3_fixtures.proxy, s3_fixtures.env

BUCKETS = {
    "4:3": {"48x64": {1: (1.0, 3), 16: (1.0, 2)}},
    "3:4": {"64x48": {8: (1.0, 3)}},
    "3:2": {"32x48": {8: (1.0, 4)}},
}


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``videos.csv``, its media and ``videos.energon`` (prepared), in one folder."""
    folder = tmp_path_factory.mktemp("vt_remote")
    csv_path = write_table(folder / "videos.csv", make_media(folder), 30)
    prepare_video_text(csv_path, progress=False)
    return csv_path


def _upload(s3: S3Server, table: Path, prefix: str) -> str:
    s3.upload(table.parent, "videos", prefix)
    return f"s3://videos/{prefix}"


def _loader(path: str | Path, num_workers: int = 0):
    wc = WorkerConfig(rank=0, world_size=1, num_workers=num_workers)
    ds = get_train_dataset(
        path, worker_config=wc, batch_size=None, shuffle_buffer_size=6,
        max_samples_per_sequence=5, task_encoder=VideoTextTaskEncoder(BUCKETS, seed=3),
    )  # fmt: skip
    return get_savable_loader(ds)


def _batches(path: str | Path, n: int, num_workers: int = 0) -> list[tuple]:
    return [
        (tuple(b["__key__"]), tuple(b["video"].shape), float(b["video"].sum()))
        for b in take(_loader(path, num_workers), n)
    ]


def _media_gets(proxy: FaultProxy, since: int) -> int:
    return sum(1 for m, p, _, _ in proxy.log[since:] if m == "GET" and "/media/" in p)


def test_a_remote_table_gives_the_local_batches(s3, proxy, table):
    url = _upload(s3, table, "same")
    expected = _batches(table.with_suffix(".energon"), 4)
    start = len(proxy.log)
    for path in (f"{url}/videos.energon", f"{url}/videos.csv"):  # the folder, or its CSV
        assert _batches(path, 4) == expected
    assert _media_gets(proxy, start) > 0  # the frames came from the bucket
    assert _batches(f"{url}/videos.energon", 4, num_workers=2) == _batches(
        table.with_suffix(".energon"), 4, num_workers=2
    )


def test_a_remote_table_resumes_exactly_and_a_local_state_restores_there(s3, table):
    url = f"{_upload(s3, table, 'resume')}/videos.energon"
    assert_loader_resumes(lambda: _loader(url), total=6, save_points=[0, 3])
    local = _loader(table.with_suffix(".energon"))
    batches = iter(local)
    next(batches), next(batches)
    state = local.save_state_rank()
    expected = [tuple(b["__key__"]) for b in take(local, 3)]
    remote = _loader(url)
    remote.restore_state_rank(state)
    assert [tuple(b["__key__"]) for b in take(remote, 3)] == expected


def test_remote_media_go_through_the_shard_cache(s3, proxy, table, monkeypatch):
    monkeypatch.setenv("ENERGON_LITE_CACHE_LIMIT", "100MB")
    url = f"{_upload(s3, table, 'cached')}/videos.energon"
    expected = _batches(table.with_suffix(".energon"), 8)
    start = len(proxy.log)
    assert _batches(url, 8) == expected
    assert 0 < _media_gets(proxy, start) <= 5  # each media object fetched once, whole
    start = len(proxy.log)
    assert _batches(url, 8) == expected
    assert _media_gets(proxy, start) == 0  # a warm cache: no GET for media


def test_remote_media_reads_are_retried(s3, table, tmp_path, monkeypatch):
    url = f"{_upload(s3, table, 'flaky')}/videos.energon"
    expected = _batches(table.with_suffix(".energon"), 6)

    def every_third_media_get_fails(number: int, path: str) -> str | None:
        return "503" if "/media/" in path and number % 3 == 0 else None

    with FaultProxy(s3.endpoint, every_third_media_get_fails) as flaky:
        s3_fixtures.point_aws_at(flaky.endpoint, monkeypatch, tmp_path / "cache")
        assert _batches(url, 6) == expected
        assert flaky.counts["503"] > 0


def test_a_changed_remote_csv_and_missing_media_are_named(s3, table, tmp_path):
    url = _upload(s3, table, "changed")
    edited = tmp_path / "videos.csv"
    shutil.copy(table, edited)
    with open(edited, "a", encoding="utf-8") as file:
        file.write("media/wide.mp4,one more,48,48,64,24\n")
    s3.client().upload_file(str(edited), "videos", "changed/videos.csv")
    with pytest.raises(DatasetFormatError, match=r"videos\.csv changed since it was prepared"):
        _loader(f"{url}/videos.csv")
    s3.client().delete_object(Bucket="videos", Key="changed/media/tall.mkv")
    loader = _loader(f"{url}/videos.energon")  # its rows are skipped and named, as locally
    with pytest.raises(
        TooManyFailuresError, match=r"cannot decode s3://videos/changed/media/tall\.mkv.*not found"
    ):
        take(loader, 60)  # a fifth of the rows: more than max_skip_fraction allows
