"""Remote datasets against real servers on 127.0.0.1: moto's S3 server, a fault-injecting
proxy in front of it, and an HTTP server with Range support.

The same prepared folder is read from local disk and from its copy in the bucket: keys,
pixels, order and states must not depend on where the bytes come from.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from conftest import installed_or_skip, make_dataset

from energon_lite import (
    Cooker,
    DefaultTaskEncoder,
    Sample,
    WorkerConfig,
    basic_sample_keys,
    get_savable_loader,
    get_train_dataset,
    get_val_dataset,
)
from energon_lite.cli import main as cli_main
from energon_lite.errors import DatasetFormatError, EnergonLiteError, RemoteStorageError
from energon_lite.flavors.jsonl import prepare_lines
from energon_lite.shards.meta import META_DIR
from energon_lite.storage import STATS, RemotePath
from energon_lite.synth.lines import write_caption_jsonl
from energon_lite.synth.servers import TEST_CREDENTIALS, FaultProxy, RangeHTTPServer, S3Server
from energon_lite.synth.shards import write_captioning_shards
from energon_lite.testing import assert_loader_resumes, take

installed_or_skip("moto", "s3fs")

SECRET = TEST_CREDENTIALS["secret"]


@pytest.fixture(scope="module")
def s3() -> S3Server:
    with S3Server() as server:
        yield server


@pytest.fixture(autouse=True)
def aws_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The standard AWS variables, pointing at the loopback server; a fresh index cache."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", TEST_CREDENTIALS["key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("ENERGON_LITE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def local_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """120 samples in 6 shards of 20, all in train."""
    return make_dataset(tmp_path_factory.mktemp("remote_local") / "ds")


@pytest.fixture(scope="module")
def s3_ds(s3: S3Server, local_ds: Path) -> str:
    """The same folder copied into the bucket."""
    s3.upload(local_ds, "data", "copies/ds")
    return "s3://data/copies/ds"


def _train(path: str | Path | RemotePath, num_workers: int = 0, **kwargs):
    options = {"batch_size": 8, "shuffle_buffer_size": 20, "max_samples_per_sequence": 10}
    options.update(kwargs)
    wc = WorkerConfig(rank=0, world_size=1, num_workers=num_workers)
    return get_savable_loader(get_train_dataset(path, worker_config=wc, **options))


def _keys_and_pixels(batch) -> tuple:
    return tuple(batch.__key__), float(batch.image.sum())


@pytest.mark.parametrize("num_workers", [0, 2])
def test_s3_copy_gives_the_same_keys_and_pixels(local_ds: Path, s3_ds: str, num_workers: int):
    local = [_keys_and_pixels(b) for b in take(_train(local_ds, num_workers), 20)]
    remote = [_keys_and_pixels(b) for b in take(_train(s3_ds, num_workers), 20)]
    assert remote == local
    assert len(remote) == 20 and len({k for keys, _ in remote for k in keys}) > 100


def test_exact_resume_on_s3(s3_ds: str) -> None:
    assert_loader_resumes(
        lambda: _train(s3_ds), total=20, save_points=[0, 3, 15], key=_keys_and_pixels
    )


def test_state_saved_on_local_copy_restores_on_s3_copy(local_ds: Path, s3_ds: str) -> None:
    loader = _train(local_ds, 2)
    iterator = iter(loader)
    for _ in range(6):
        next(iterator)
    state = loader.save_state_rank()
    expected = [_keys_and_pixels(next(iterator)) for _ in range(8)]
    del iterator
    moved = _train(s3_ds, 2)
    moved.restore_state_rank(state)
    assert [_keys_and_pixels(b) for b in take(moved, 8)] == expected


def test_reads_are_ranged_per_chunk_not_per_sample(s3_ds: str) -> None:
    before = STATS.snapshot()
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = get_val_dataset(s3_ds, worker_config=wc, batch_size=10, split_part="train")
    samples = sum(len(b.__key__) for b in get_savable_loader(ds))
    requests = STATS.requests - before["requests"]
    assert samples == 120
    assert requests <= 0.25 * samples  # 6 shards: listing, metadata, 6 indexes, ~1 GET per shard


def test_prepare_info_lint_preview_on_an_s3_prefix(
    s3: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = tmp_path / "raw"
    write_captioning_shards(raw, 60, 20, image_size=(16, 16), with_json=True)
    prefix = f"raw-{uuid.uuid4().hex[:8]}"
    s3.upload(raw, "data", prefix)
    url = f"s3://data/{prefix}"
    args = ["prepare", "--non-interactive", "--split-ratio", "2,1", "--num-workers", "2",
            "--sample-type", "CaptioningSample", "--field-map", '{"image": "jpg", "caption": "txt"}']  # fmt: skip
    assert cli_main([*args, url]) == 0
    keys = {o["Key"] for o in s3.client().list_objects_v2(Bucket="data", Prefix=prefix)["Contents"]}
    assert {
        f"{prefix}/{META_DIR}/{n}" for n in (".info.json", "split.yaml", "dataset.yaml")
    } <= keys
    assert f"{prefix}/parts/data-0.tar.idx" in keys
    # the remote index is the one a local prepare writes
    make_dataset(local := tmp_path / "local", 60, 20, split_ratio=[("train", 2), ("val", 1)])
    body = s3.client().get_object(Bucket="data", Key=f"{prefix}/parts/data-1.tar.idx")["Body"]
    assert body.read() == (local / "parts" / "data-1.tar.idx").read_bytes()
    capsys.readouterr()
    assert cli_main(["info", url]) == 0
    info = capsys.readouterr().out
    assert "total: 60 samples, 3 shards" in info and "split train: 40 samples" in info
    assert cli_main(["lint", "--quiet", url]) == 0
    assert cli_main(["preview", "-n", "2", url]) == 0
    assert "caption" in capsys.readouterr().out
    assert SECRET not in info


def test_a_wrong_bucket_or_prefix_is_told_from_an_unprepared_dataset(
    s3: S3Server, s3_ds: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = tmp_path / "raw"
    write_captioning_shards(raw, 20, 10, image_size=(8, 8))
    s3.upload(raw, "data", "unprepared")

    def error(url: str) -> str:
        capsys.readouterr()
        assert cli_main(["info", url]) == 1
        return capsys.readouterr().err

    assert "bucket 'nobucket' does not exist" in error("s3://nobucket/pets")
    assert "bucket 'data' holds no object under the prefix 'pets'" in error("s3://data/pets")
    unprepared = error("s3://data/unprepared")
    assert "has no .nv-meta folder: it is not a prepared dataset (yet)" in unprepared
    assert "energon-lite prepare" in unprepared
    assert cli_main(["info", s3_ds]) == 0


def test_prepare_records_media_metadata_on_an_s3_prefix_as_energon_does(
    s3: S3Server, tmp_path: Path
) -> None:
    """Energon's `prepare --media-metadata-by-extension --no-progress` on a bucket prefix:
    the dataset is prepared and each image part's size lands in .nv-meta/index.sqlite."""
    import sqlite3

    raw = tmp_path / "raw"
    write_captioning_shards(raw, 20, 10, image_size=(16, 12))
    prefix = f"media-{uuid.uuid4().hex[:8]}"
    s3.upload(raw, "data", prefix)
    url = f"s3://data/{prefix}"
    assert cli_main(["prepare", url, "--non-interactive", "--no-progress", "--split-ratio=1,0,0",
                     "--sample-type=CaptioningSample", '--field-map={"image": "jpg", "caption": "txt"}',
                     "--media-metadata-by-extension"]) == 0  # fmt: skip
    db = tmp_path / "index.sqlite"
    db.write_bytes(RemotePath(f"{url}/{META_DIR}/index.sqlite").read_bytes())
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT entry_key, metadata_type, metadata_json FROM media_metadata")
        found = {key: (kind, json.loads(meta)) for key, kind, meta in rows}
    assert len(found) == 20 and {kind for kind, _ in found.values()} == {"image"}
    assert {(m["width"], m["height"]) for _, m in found.values()} == {(16, 12)}
    assert len(list(take(_train(url, batch_size=5), 4))) == 4


class _Http10S3(BaseHTTPRequestHandler):
    """An S3-compatible store as plain HTTP/1.0 (no ``100 Continue``): it reads a PUT's
    body by Content-Length and keeps it."""

    objects: dict[str, bytes] = {}

    def do_PUT(self) -> None:
        self.objects[self.path] = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("ETag", '"1"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_write_to_a_store_without_100_continue_sends_its_body_plainly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """botocore's defaults would wait for ``100 Continue`` and send an aws-chunked body with a
    checksum trailer; a store that speaks neither must get the bytes as they are, at once."""
    from energon_lite.storage import ops

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Http10S3)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.server_port}")
        monkeypatch.delenv("AWS_REQUEST_CHECKSUM_CALCULATION", raising=False)
        ops.write_atomic(RemotePath("s3://plain/dir/index.bin"), b"0123456789" * 100)
    finally:
        server.shutdown()
        thread.join(timeout=10)
    assert _Http10S3.objects == {"/plain/dir/index.bin": b"0123456789" * 100}


def test_prepare_failure_writes_nothing(s3: S3Server, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    write_captioning_shards(raw, 40, 20, image_size=(8, 8))
    (raw / "parts" / "data-1.tar").write_bytes(b"not a tar" * 100)
    prefix = f"broken-{uuid.uuid4().hex[:8]}"
    s3.upload(raw, "data", prefix)
    with pytest.raises(DatasetFormatError, match=r"data-1\.tar"):
        from energon_lite import prepare_dataset

        prepare_dataset(f"s3://data/{prefix}", split_ratio=[("train", 1)],
                        sample_type="CaptioningSample", field_map={"image": "jpg", "caption": "txt"},
                        progress=False)  # fmt: skip
    keys = {o["Key"] for o in s3.client().list_objects_v2(Bucket="data", Prefix=prefix)["Contents"]}
    assert not any(k.endswith(".idx") or META_DIR in k for k in keys)


def test_a_replaced_shard_of_the_same_size_is_refused_on_s3(
    s3: S3Server, local_ds: Path, s3_ds: str
) -> None:
    """An S3 copy has no mtimes to trust: each shard's probe (its first and last samples'
    bytes) is read again, with ranged GETs, when a process first reads the shard."""
    prefix = f"replaced-{uuid.uuid4().hex[:8]}"
    s3.upload(local_ds, "data", prefix)
    shards = sorted(local_ds.glob("parts/*.tar"))
    sizes = [p.stat().st_size for p in shards]
    a, b = next((i, j) for i in range(len(shards)) for j in range(i) if sizes[i] == sizes[j])
    s3.client().put_object(
        Bucket="data", Key=f"{prefix}/parts/{shards[a].name}", Body=shards[b].read_bytes()
    )
    with pytest.raises(
        DatasetFormatError, match=rf"{shards[a].name}: shard replaced since prepare"
    ):
        take(_train(f"s3://data/{prefix}", shuffle_buffer_size=None), 20)
    assert len(take(_train(s3_ds, shuffle_buffer_size=None), 20)) == 20  # the true copy reads


def test_metadataset_blends_a_local_and_an_s3_dataset(
    s3: S3Server, local_ds: Path, s3_ds: str, tmp_path: Path
) -> None:
    text = f"""__module__: megatron.energon
__class__: MetadatasetV2
splits:
  train:
    blend:
      - path: {local_ds}
        weight: 1
        subflavors: {{origin: local}}
      - path: {s3_ds}
        weight: 1
        subflavors: {{origin: s3}}
"""
    (yaml_path := tmp_path / "blend.yaml").write_text(text)
    origins = {
        flavor["origin"] for batch in take(_train(yaml_path), 12) for flavor in batch.__subflavors__
    }
    assert origins == {"local", "s3"}
    # the YAML itself in the bucket, naming the dataset relative to itself
    s3.client().put_object(Bucket="data", Key="copies/remote.yaml",
                           Body=text.replace(str(local_ds), "ds").encode())  # fmt: skip
    batches = take(_train("s3://data/copies/remote.yaml"), 4)
    assert len(batches) == 4 and all(len(b.__key__) == 8 for b in batches)


def test_missing_prefix_is_a_clear_error_without_secrets(
    s3_ds: str, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    with (
        caplog.at_level(logging.DEBUG, logger="energon_lite"),
        pytest.raises(EnergonLiteError) as info,
    ):
        _train("s3://data/no/such/prefix")
    assert "s3://data/no/such/prefix" in str(info.value)
    with pytest.raises(EnergonLiteError) as bucket:
        _train("s3://no-such-bucket/ds")
    assert "s3://no-such-bucket/ds" in str(bucket.value)
    assert cli_main(["info", "s3://data/no/such/prefix"]) == 1  # cli/errors.py: always 1
    err = capsys.readouterr().err
    assert "s3://data/no/such/prefix" in err
    for text in (str(info.value), str(bucket.value), err, caplog.text):
        assert SECRET not in text and TEST_CREDENTIALS["key"] not in text


def test_storage_options_carry_credentials_and_stay_out_of_errors_and_state(
    s3: S3Server, s3_ds: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    options = {"endpoint_url": s3.endpoint, **TEST_CREDENTIALS}
    loader = _train(RemotePath(s3_ds, storage_options=options))
    assert len(take(loader, 2)) == 2
    assert SECRET not in repr(loader.save_state_rank()) and SECRET not in repr(
        RemotePath(s3_ds, options)
    )
    with pytest.raises(EnergonLiteError) as info:
        _train(RemotePath("s3://data/nothing/here", storage_options=options))
    assert SECRET not in str(info.value) and "s3://data/nothing/here" in str(info.value)


def test_msc_profile_maps_onto_the_bucket(
    s3: S3Server, local_ds: Path, s3_ds: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "msc.yaml"
    config.write_text(
        f"""profiles:
  loopback:
    storage_provider:
      type: s3
      options:
        base_path: data/copies
        endpoint_url: {s3.endpoint}
        region_name: us-east-1
    credentials_provider:
      type: S3Credentials
      options:
        access_key: ${{TEST_KEY}}
        secret_key: ${{TEST_SECRET}}
"""
    )
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("MSC_CONFIG", str(config))
    monkeypatch.setenv("TEST_KEY", TEST_CREDENTIALS["key"])
    monkeypatch.setenv("TEST_SECRET", SECRET)
    local = [_keys_and_pixels(b) for b in take(_train(local_ds), 6)]
    assert [_keys_and_pixels(b) for b in take(_train("msc://loopback/ds"), 6)] == local


def test_msc_profile_from_an_rclone_config(
    s3: S3Server, local_ds: Path, s3_ds: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Energon's tests configure ``msc://`` through rclone.conf (as MSC reads it): a section of
    ``type = s3`` is the profile; without ``base_path`` the URL's first folder is the bucket."""
    rclone = tmp_path / "xdg" / "rclone" / "rclone.conf"
    rclone.parent.mkdir(parents=True)
    rclone.write_text(
        f"""[other]
type = azureblob

[rcloned]
type = s3
env_auth = false
access_key_id = {TEST_CREDENTIALS["key"]}
secret_access_key = {SECRET}
region = us-east-1
endpoint = {s3.endpoint}
"""
    )
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "MSC_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no MSC config file anywhere
    local = [_keys_and_pixels(b) for b in take(_train(local_ds), 6)]
    assert [_keys_and_pixels(b) for b in take(_train("msc://rcloned/data/copies/ds"), 6)] == local
    with pytest.raises(EnergonLiteError) as info:
        _train("msc://missing/data/copies/ds")
    assert str(rclone) in str(info.value) and "'missing'" in str(info.value)
    assert "rcloned" in str(info.value) and SECRET not in str(info.value)


@dataclass
class Line(Sample):
    text: str = ""


def _cook_line(sample: dict) -> Line:
    return Line(**basic_sample_keys(sample), text=sample["json"]["caption"])


class Lines(DefaultTaskEncoder):
    cookers = (Cooker(_cook_line),)


def test_a_jsonl_file_on_remote_storage_is_read_as_in_energon(s3: S3Server, tmp_path: Path) -> None:
    """A prepared .jsonl (with its .idx) in a bucket is read by ranged GETs, as Energon reads
    msc:// line files: directly, and as metadataset entries relative to a remote YAML. Each
    line once per epoch, the same samples as the local copy gives; exact resume."""
    lines = tmp_path / "lines"
    lines.mkdir()
    for name, count in (("ds1.jsonl", 30), ("ds2.jsonl", 20)):
        prepare_lines(write_caption_jsonl(lines / name, count), progress=False)
    (lines / "blend.yaml").write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        "    blend:\n      - {path: ds1.jsonl, weight: 1}\n      - {path: ds2.jsonl, weight: 1}\n"
    )
    s3.upload(lines, "data", "lines")

    def texts(path: str | Path, workers: int = 0) -> Counter:
        loader = _train(path, workers, task_encoder=Lines(), batch_size=5, repeat=False,
                        shuffle_buffer_size=None, max_samples_per_sequence=None)  # fmt: skip
        return Counter(text for batch in loader for text in batch.text)

    remote = texts("s3://data/lines/ds1.jsonl", workers=2)
    assert remote == texts(lines / "ds1.jsonl") and sum(remote.values()) == 30
    assert set(remote.values()) == {1}
    blended = texts("s3://data/lines/blend.yaml")
    assert blended == texts(lines / "blend.yaml") and sum(blended.values()) == 50
    assert_loader_resumes(
        lambda: _train("s3://data/lines/blend.yaml", 2, task_encoder=Lines(), batch_size=4),
        total=20,
        save_points=[0, 3, 11],
    )


def test_faults_are_retried_nothing_lost_or_repeated(
    s3: S3Server, local_ds: Path, s3_ds: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def schedule(n: int, path: str) -> str | None:
        return {1: "503", 3: "drop", 4: "delay:0.05"}.get(n % 5)

    with FaultProxy(s3.endpoint, schedule) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        monkeypatch.setattr("energon_lite.storage.ranged.READAHEAD", 64 << 10)  # more requests
        before = STATS.snapshot()
        wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
        ds = get_val_dataset(s3_ds, worker_config=wc, batch_size=10, split_part="train")
        keys = [k for b in get_savable_loader(ds) for k in b.__key__]
        retries = STATS.retries - before["retries"]
    assert len(keys) == 120 and len(set(keys)) == 120
    assert proxy.counts["503"] > 0 and proxy.counts["drop"] > 0
    # every 503 is one counted retry; a dropped keep-alive connection is re-sent once by
    # aiohttp itself (a drop surfaces to our retries only when the fresh connection fails too)
    assert proxy.counts["503"] <= retries <= proxy.counts["503"] + proxy.counts["drop"]


def test_worker_processes_leave_the_trainers_connections_alone(
    s3: S3Server, local_ds: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # forked workers inherit the trainer's open connections and its event loop's epoll set;
    # a worker that closed them there took them out of the trainer's epoll set, so the
    # trainer's next request on such a connection was answered but never read: it timed out
    # and went out again (the proxy then saw it twice)
    with FaultProxy(s3.endpoint) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        options = {"endpoint_url": proxy.endpoint, "timeout": 3, **TEST_CREDENTIALS}
        s3.upload(local_ds, "data", "copies/forked")  # its own copy: the trainer reads it
        path = RemotePath("s3://data/copies/forked", storage_options=options)
        openings = []
        for num_workers in (0, 2, 2):  # the first warms the index cache
            start = len(proxy.log)
            wc = WorkerConfig(rank=0, world_size=1, num_workers=num_workers)
            ds = get_val_dataset(path, worker_config=wc, batch_size=10, split_part="train")
            openings.append(proxy.log[start:])
            assert len([k for b in get_savable_loader(ds) for k in b.__key__]) == 120
    # an opening after worker processes sends what one before them sent, nothing twice
    assert openings[2] == openings[1], openings


def test_a_range_that_stays_broken_stops_the_run_naming_the_object(
    s3: S3Server, s3_ds: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An infrastructure failure, not bad samples: retried, then the run stops naming the
    object and byte range (skipping its samples would lose them; docs/safety.md)."""

    def schedule(n: int, path: str) -> str | None:
        return "503" if path.split("?")[0].endswith("data-2.tar") else None

    with FaultProxy(s3.endpoint, schedule) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        monkeypatch.setenv("ENERGON_LITE_REMOTE_ATTEMPTS", "2")
        wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
        ds = get_val_dataset(s3_ds, worker_config=wc, batch_size=10, split_part="train")
        keys: list[str] = []
        with pytest.raises(RemoteStorageError) as caught:
            for batch in get_savable_loader(ds):
                keys += batch.__key__
        broken = proxy.counts["503"]
    assert broken == 2 and len(keys) == 40  # shards 0 and 1, then the attempts on shard 2
    message = str(caught.value)
    assert "s3://data/copies/ds/parts/data-2.tar" in message and "after 2 attempts" in message
    assert SECRET not in message


def test_http_server_with_ranges_serves_a_prepared_folder(local_ds: Path) -> None:
    with RangeHTTPServer(local_ds.parent) as server:
        url = f"{server.url}/{local_ds.name}"
        local = [_keys_and_pixels(b) for b in take(_train(local_ds), 15)]
        assert [_keys_and_pixels(b) for b in take(_train(url), 15)] == local
        assert server.requests < 15 * 8  # ranged reads per chunk, not per sample
    with RangeHTTPServer(local_ds.parent) as server, pytest.raises(EnergonLiteError) as info:
        _train(f"{server.url}/missing")
    assert "/missing" in str(info.value)


def test_index_files_are_fetched_once_and_cached(s3_ds: str, tmp_path: Path) -> None:
    _ = take(_train(s3_ds), 15)  # every shard's index opened
    cached = list((tmp_path / "cache").glob("*.idx"))
    assert len(cached) == 6
    assert all(np.fromfile(p, dtype="<u8")[0] == 0 for p in cached)


def test_sequential_reads_fetch_each_window_once(
    local_ds: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from energon_lite.storage import ShardFile

    monkeypatch.setattr("energon_lite.storage.ranged.READAHEAD", 8192)
    shard = local_ds / "parts" / "data-0.tar"
    expected = shard.read_bytes()
    with RangeHTTPServer(local_ds.parent) as server:
        remote = ShardFile(RemotePath(f"{server.url}/{local_ds.name}/parts/data-0.tar"))
        got = b"".join(remote.pread(1000, at) for at in range(0, len(expected), 1000))
        requests = server.requests
    assert got == expected
    windows = -(-len(expected) // 8192)
    assert windows <= requests <= windows + 2  # one GET per window (+ a HEAD for the size)


def test_signed_urls_and_secrets_are_scrubbed_from_messages() -> None:
    from energon_lite.storage import scrub

    text = (
        "503 at https://user:pw@host/b/k.tar?X-Amz-Signature=abc123&X-Amz-Credential=AKIA token-xyz"
    )
    clean = scrub(text, ["token-xyz"])
    assert "https://host/b/k.tar" in clean
    assert not any(s in clean for s in ("abc123", "AKIA", "user:pw", "token-xyz"))
    path = RemotePath("https://user:pw@host/b/k.tar?X-Amz-Signature=abc123")
    assert str(path) == repr(path)[12:-2] == "https://host/b/k.tar"
    assert "abc123" in path.url  # the request itself still carries the signature
