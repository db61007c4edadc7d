"""Remote objects that change under a dataset, slow servers and a full index cache, against
real servers on 127.0.0.1 (moto's S3 server, an HTTP server with Range) and real processes.

A shard replaced by an object of the same size used to be served through the old index
(repeats and losses); every read is now conditional on the ETag (or Last-Modified) pinned
when the dataset was prepared or opened.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import installed_or_skip, make_dataset

from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset
from energon_lite.errors import DatasetFormatError, RemoteStorageError
from energon_lite.shards.meta import META_DIR
from energon_lite.shards.shard_record import RECORD
from energon_lite.storage import STATS, RemotePath, ops, ranged
from energon_lite.synth.servers import (
    TEST_CREDENTIALS,
    FaultProxy,
    RangeHTTPServer,
    S3Server,
    write_msc_config,
)

installed_or_skip("moto", "s3fs")

BUCKET = "changes"


@pytest.fixture(scope="module")
def s3() -> S3Server:
    with S3Server() as server:
        yield server


@pytest.fixture(autouse=True)
def aws_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", TEST_CREDENTIALS["key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", TEST_CREDENTIALS["secret"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("ENERGON_LITE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(ranged, "READAHEAD", 4096)  # a GET per few samples, not per shard


@pytest.fixture(scope="module")
def local_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("changes") / "ds")  # 6 shards of 20


def _upload(s3: S3Server, folder: Path) -> str:
    prefix = f"ds-{uuid.uuid4().hex[:8]}"
    s3.upload(folder, BUCKET, prefix)
    return prefix


def _same_size_edit(data: bytes) -> bytes:
    """Other bytes at the same size: a stand-in for a re-encoded or re-shuffled shard."""
    edited = bytearray(data)
    edited[600:-1100] = bytes(edited[600:-1100])[::-1]
    assert len(edited) == len(data) and edited != data
    return bytes(edited)


def _replace_shards(s3: S3Server, prefix: str) -> list[str]:
    client = s3.client()
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/parts/")["Contents"]
    keys = [o["Key"] for o in listed if o["Key"].endswith(".tar")]
    for key in keys:
        body = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        client.put_object(Bucket=BUCKET, Key=key, Body=_same_size_edit(body))
    return keys


def _loader(path: str | RemotePath, num_workers: int = 0, **kwargs: object):
    wc = WorkerConfig(rank=0, world_size=1, num_workers=num_workers)
    options = {"batch_size": 4, "shuffle_buffer_size": None, "max_samples_per_sequence": 4}
    options.update(kwargs)
    return get_savable_loader(get_train_dataset(path, worker_config=wc, **options))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_shard_replaced_mid_run_by_one_of_the_same_size_stops_the_run(
    s3: S3Server, local_ds: Path, num_workers: int
) -> None:
    prefix = _upload(s3, local_ds)  # prepared locally: no ETag recorded, pinned at open
    batches = iter(_loader(f"s3://{BUCKET}/{prefix}", num_workers))
    first = [next(batches) for _ in range(2)]
    assert all(len(b.__key__) == 4 for b in first)
    _replace_shards(s3, prefix)
    delivered = 8
    with pytest.raises(Exception) as info:
        for batch in batches:
            delivered += len(batch.__key__)
    message = str(info.value)
    assert f"s3://{BUCKET}/{prefix}/parts/data-" in message
    assert "the object changed since the dataset was prepared or opened" in message
    assert "re-run `energon-lite prepare`" in message
    assert delivered < 120  # stopped, not served through the old index


def test_a_shard_replaced_after_a_remote_prepare_is_refused_at_open(
    s3: S3Server, local_ds: Path
) -> None:
    prefix = _upload(s3, local_ds)
    url = f"s3://{BUCKET}/{prefix}"
    from energon_lite import prepare_dataset

    prepare_dataset(
        url, split_ratio=[("train", 1)], sample_type="CaptioningSample",
        field_map={"image": "jpg", "caption": "txt"}, progress=False, force_overwrite=True,
    )  # fmt: skip
    record = s3.client().get_object(Bucket=BUCKET, Key=f"{prefix}/{META_DIR}/{RECORD}")
    text = record["Body"].read().decode()
    assert '"remote_versions"' in text and '"parts/data-0.tar": "etag:' in text
    _replace_shards(s3, prefix)
    script = (
        "import sys, energon_lite as el\n"
        "wc = el.WorkerConfig(rank=0, world_size=1, num_workers=0)\n"
        "el.get_train_dataset(sys.argv[1], worker_config=wc, batch_size=4,\n"
        "    shuffle_buffer_size=None, max_samples_per_sequence=None)\n"
    )
    done = subprocess.run(  # a fresh process: nothing read before the replacement
        [sys.executable, "-c", script, url], capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert f"ObjectChangedError: {url}/parts/data-0.tar: the object changed" in done.stderr
    assert "etag:" in done.stderr and "re-run `energon-lite prepare`" in done.stderr


def test_msc_reads_are_conditional_too(
    s3: S3Server, local_ds: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = _upload(s3, local_ds)
    config = write_msc_config(tmp_path / "msc.yaml", "loop", s3.endpoint, BUCKET, None)
    monkeypatch.setenv("MSC_CONFIG", str(config))
    batches = iter(_loader(f"msc://loop/{prefix}"))
    next(batches)
    _replace_shards(s3, prefix)
    with pytest.raises(DatasetFormatError, match=rf"msc://loop/{prefix}/parts/data-.*changed"):
        for _ in batches:
            pass


def test_a_dataset_replaced_whole_opens_again_in_the_same_process(
    s3: S3Server, local_ds: Path, tmp_path: Path
) -> None:
    """Versions are pinned from fresh listings at each open: a legitimately replaced
    dataset (new shards and a new .nv-meta) is read, not refused on stale ETags."""
    prefix = _upload(s3, local_ds)
    url = f"s3://{BUCKET}/{prefix}"
    first = [k for batch in _loader(url, repeat=False) for k in batch.__key__]
    assert len(first) == 120
    client = s3.client()
    for item in client.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/")["Contents"]:
        client.delete_object(Bucket=BUCKET, Key=item["Key"])
    s3.upload(make_dataset(tmp_path / "other", 90, 30), BUCKET, prefix)  # 3 shards of 30
    again = [k for batch in _loader(url, repeat=False) for k in batch.__key__]
    assert len(again) == 90 and len(set(again)) == 90


def test_an_http_shard_rewritten_at_the_same_size_is_refused(tmp_path: Path) -> None:
    folder = make_dataset(tmp_path / "web" / "ds")
    with RangeHTTPServer(tmp_path / "web") as web:
        batches = iter(_loader(f"{web.url}/ds"))
        next(batches)
        for shard in sorted((folder / "parts").glob("*.tar")):
            data = shard.read_bytes()
            time.sleep(0.01)  # a new mtime: the server's ETag
            shard.write_bytes(_same_size_edit(data))
        with pytest.raises(DatasetFormatError, match=rf"{web.url}/ds/parts/data-.*changed"):
            for _ in batches:
                pass


def _last_modified_server(folder: Path) -> ThreadingHTTPServer:
    """Serves ``folder`` with Range and a Last-Modified header, but no ETag."""
    from email.utils import formatdate

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 30

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _head(self, status: int, path: Path, length: int) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(length))
            self.send_header("Last-Modified", formatdate(path.stat().st_mtime, usegmt=True))
            self.end_headers()

        def _path(self) -> Path | None:
            path = folder / self.path.split("?", 1)[0].lstrip("/")
            if not path.is_file():
                self.send_error(404)
                return None
            return path

        def do_HEAD(self) -> None:
            path = self._path()
            if path is not None:
                self._head(200, path, path.stat().st_size)

        def do_GET(self) -> None:
            path = self._path()
            if path is None:
                return
            data = path.read_bytes()
            first, _, last = (
                self.headers.get("Range", "bytes=0-").removeprefix("bytes=").partition("-")
            )
            start, end = int(first or 0), int(last) + 1 if last else len(data)
            body = data[start:end]
            self._head(206, path, len(body))
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    return server


def test_an_http_shard_without_etag_is_pinned_by_last_modified(tmp_path: Path) -> None:
    folder = make_dataset(tmp_path / "web" / "ds")
    server = _last_modified_server(tmp_path / "web")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/ds"
        assert ops.version(RemotePath(f"{url}/parts/data-0.tar")).startswith("last-modified:")
        batches = iter(_loader(url))
        next(batches)
        for shard in sorted((folder / "parts").glob("*.tar")):
            data = shard.read_bytes()
            shard.write_bytes(_same_size_edit(data))
            os.utime(shard, (time.time() + 10, time.time() + 10))  # another second
        with pytest.raises(DatasetFormatError, match=rf"{url}/parts/data-.*changed"):
            for _ in batches:
                pass
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class _Trickle(BaseHTTPRequestHandler):
    """Answers every GET with 1,000 bytes per second, for at most 20 s (a bounded test)."""

    protocol_version = "HTTP/1.1"
    timeout = 30

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(1 << 20))
        self.send_header("ETag", '"slow-1"')
        self.end_headers()

    def do_GET(self) -> None:
        self.server.gets += 1  # type: ignore[attr-defined]
        self.send_response(206)
        self.send_header("Content-Length", str(1 << 20))
        self.send_header("ETag", '"slow-1"')
        self.end_headers()
        deadline = time.monotonic() + 20
        try:
            while time.monotonic() < deadline:
                self.wfile.write(b"x" * 100)
                self.wfile.flush()
                time.sleep(0.1)
        except OSError:  # the client gave up: what the bound is for
            return
        self.close_connection = True


def test_a_trickling_server_is_bounded_per_request_then_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    server.daemon_threads = True
    server.gets = 0  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("ENERGON_LITE_REQUEST_TIMEOUT", "1.5")
        monkeypatch.setenv("ENERGON_LITE_REMOTE_ATTEMPTS", "2")
        url = RemotePath(f"http://127.0.0.1:{server.server_address[1]}/slow.tar")
        before = STATS.snapshot()
        with pytest.raises(RemoteStorageError) as info:
            ops.read_range(url, 0, 1 << 20)
        # the bound's own message (only a request cut at 1.5 s says it), not a measured
        # duration: on a loaded machine a duration says more about the machine than the bound
        assert "after 2 attempts" in str(info.value) and "within 1.5 s" in str(info.value)
        assert "ENERGON_LITE_REQUEST_TIMEOUT" in str(info.value)
        assert STATS.snapshot()["retries"] - before["retries"] == 1
        assert server.gets == 2  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_a_slow_s3_answer_is_bounded_per_request_then_retried(
    s3: S3Server, local_ds: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = _upload(s3, local_ds)
    shard = f"/{BUCKET}/{prefix}/parts/data-0.tar"

    def slow_shard_gets(number: int, path: str) -> str | None:
        return "delay:6" if path.split("?")[0] == shard else None  # listings pass

    monkeypatch.setenv("ENERGON_LITE_REQUEST_TIMEOUT", "1.5")
    monkeypatch.setenv("ENERGON_LITE_REMOTE_ATTEMPTS", "2")
    with FaultProxy(s3.endpoint, slow_shard_gets) as proxy:
        url = RemotePath(
            f"s3://{BUCKET}/{prefix}/parts/data-0.tar",
            storage_options={"endpoint_url": proxy.endpoint, **TEST_CREDENTIALS},
        )
        with pytest.raises(RemoteStorageError) as info:
            ops.read_range(url, 0, 4096)
        # each 6 s answer was cut by the 1.5 s bound (a longer wait would have read it whole)
        assert "after 2 attempts" in str(info.value) and "within 1.5 s" in str(info.value)
        assert proxy.counts["delay"] == 2


@pytest.mark.skipif(os.getuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_full_index_cache_names_its_folder(
    s3: S3Server, local_ds: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "tiny"
    cache.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(cache)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        with open(cache / "filler", "wb", buffering=0) as filler:  # full, to the last block
            try:
                while True:
                    filler.write(b"\0" * 512)
            except OSError:
                pass
        monkeypatch.setenv("ENERGON_LITE_CACHE_DIR", str(cache))
        prefix = _upload(s3, local_ds)
        with pytest.raises(OSError) as info:
            next(iter(_loader(f"s3://{BUCKET}/{prefix}")))
        message = str(info.value)
        assert str(cache) in message and "No space left on device" in message
        assert "ENERGON_LITE_CACHE_DIR" in message
        assert [p.name for p in cache.iterdir()] == ["filler"]  # no temp file left behind
    finally:
        subprocess.run(["umount", "--lazy", str(cache)], check=False)
