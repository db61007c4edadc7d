"""Azure Blob (``az://``, adlfs) against Azurite and Google Cloud Storage (``gs://``, gcsfs)
against fake-gcs-server, both started on 127.0.0.1 by the fixtures.

The same prepared folder is read from local disk, from its S3 copy (moto) and from its Azure
and GCS copies: keys, pixels and states must not depend on the store. A state saved on one
store restores on another copy of the same data.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import installed_or_skip, make_dataset
from test_remote import _keys_and_pixels, _train

from energon_lite.cli import main as cli_main
from energon_lite.errors import DatasetFormatError, RemoteStorageError
from energon_lite.storage import STATS, RemotePath, ops
from energon_lite.storage.ops import ObjectChangedError
from energon_lite.synth.servers import TEST_CREDENTIALS, S3Server
from energon_lite.synth.shards import write_captioning_shards
from energon_lite.testing import assert_loader_resumes, take

installed_or_skip("moto", "s3fs")

CLOUDS = ["az", "gs"]


def _start(cloud: str):
    """The emulator for ``cloud``, or a skip saying what is missing."""
    from energon_lite.synth.cloud_servers import AzuriteServer, GcsServer

    try:
        if cloud == "az":
            pytest.importorskip("adlfs", reason="az:// needs adlfs: pip install 'energon-lite[azure]'")  # fmt: skip
            return AzuriteServer()
        pytest.importorskip("gcsfs", reason="gs:// needs gcsfs: pip install 'energon-lite[gcs]'")
        return GcsServer()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module", params=CLOUDS)
def cloud(request: pytest.FixtureRequest) -> Iterator[tuple[str, object]]:
    with _start(request.param) as server:
        yield request.param, server


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with S3Server() as server:
        yield server


@pytest.fixture(autouse=True)
def cloud_env(
    cloud: tuple[str, object], s3: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each cloud's standard variables, pointing at the loopback emulators."""
    name, server = cloud
    for var in ("AZURE_STORAGE_CONNECTION_STRING", "STORAGE_EMULATOR_HOST"):
        monkeypatch.delenv(var, raising=False)
    if name == "az":
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", server.connection_string)  # type: ignore[attr-defined]
    else:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.endpoint)  # type: ignore[attr-defined]
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", TEST_CREDENTIALS["key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", TEST_CREDENTIALS["secret"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("ENERGON_LITE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ENERGON_LITE_REMOTE_ATTEMPTS", "3")


@pytest.fixture(scope="module")
def local_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """120 samples in 6 shards of 20, all in train."""
    return make_dataset(tmp_path_factory.mktemp("clouds_local") / "ds")


def _copy(cloud: tuple[str, object], folder: Path, prefix: str | None = None) -> str:
    name, server = cloud
    prefix = prefix or f"copy-{uuid.uuid4().hex[:8]}"
    server.upload(folder, "data", prefix)  # type: ignore[attr-defined]
    return f"{name}://data/{prefix}"


@pytest.fixture(scope="module")
def cloud_ds(cloud: tuple[str, object], local_ds: Path) -> str:
    return _copy(cloud, local_ds, "copies/ds")


@pytest.mark.parametrize("num_workers", [0, 2])
def test_cloud_copy_gives_the_same_keys_and_pixels(
    local_ds: Path, cloud_ds: str, num_workers: int
) -> None:
    local = [_keys_and_pixels(b) for b in take(_train(local_ds, num_workers), 16)]
    remote = [_keys_and_pixels(b) for b in take(_train(cloud_ds, num_workers), 16)]
    assert remote == local
    assert len({k for keys, _ in remote for k in keys}) > 100


def test_exact_resume_on_the_cloud(cloud_ds: str) -> None:
    assert_loader_resumes(
        lambda: _train(cloud_ds), total=16, save_points=[0, 3, 12], key=_keys_and_pixels
    )


@pytest.mark.parametrize("source", ["s3", "local"])
def test_a_state_saved_on_one_store_restores_on_another(
    s3: S3Server, local_ds: Path, cloud_ds: str, source: str
) -> None:
    """Save on the S3 (or local) copy, restore on the Azure/GCS copy: same next batches."""
    if source == "s3":
        prefix = f"copy-{uuid.uuid4().hex[:8]}"
        s3.upload(local_ds, "data", prefix)
        origin: str | Path = f"s3://data/{prefix}"
    else:
        origin = local_ds
    loader = _train(origin, 2)
    iterator = iter(loader)
    for _ in range(5):
        next(iterator)
    state = loader.save_state_rank()
    expected = [_keys_and_pixels(next(iterator)) for _ in range(6)]
    del iterator
    moved = _train(cloud_ds, 2)
    moved.restore_state_rank(state)
    assert [_keys_and_pixels(b) for b in take(moved, 6)] == expected


def test_reads_are_ranged_and_conditional(cloud: tuple[str, object], local_ds: Path) -> None:
    """One ranged GET per window, pinned to the object's version: a replaced object (same
    size) is refused naming it, never served."""
    url = _copy(cloud, local_ds)
    shard = RemotePath(f"{url}/parts/data-0.tar")
    version = ops.version(shard)
    assert version.startswith("generation:" if cloud[0] == "gs" else "etag:")
    original = (local_ds / "parts" / "data-0.tar").read_bytes()
    before = STATS.snapshot()
    assert ops.read_range(shard, 512, 1536, version) == original[512:1536]
    assert STATS.requests - before["requests"] == 1
    server = cloud[1]
    replacement = (local_ds / "parts" / "data-1.tar").read_bytes()[: len(original)]
    server.put("data", f"{url.split('/', 3)[3]}/parts/data-0.tar", replacement.ljust(len(original), b"\0"))  # type: ignore[attr-defined]  # fmt: skip
    with pytest.raises(ObjectChangedError, match=rf"{url}/parts/data-0\.tar: the object changed"):
        ops.read_range(shard, 512, 1536, version)


def test_a_missing_object_names_its_url_and_a_bad_key_is_not_printed(
    cloud: tuple[str, object], cloud_ds: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(DatasetFormatError, match=rf"{cloud_ds}/parts/nothing\.tar: not found"):
        ops.read_bytes(RemotePath(f"{cloud_ds}/parts/nothing.tar"))
    if cloud[0] != "az":
        return  # the GCS emulator checks no credentials
    server = cloud[1]
    wrong = server.connection_string.replace(server.key, "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXk=")  # type: ignore[attr-defined]  # fmt: skip
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", wrong)
    with pytest.raises(RemoteStorageError) as info:
        ops.read_range_all(RemotePath(f"{cloud_ds}/parts/data-2.tar"))
    message = str(info.value)
    assert f"{cloud_ds}/parts/data-2.tar" in message
    assert "d3Jvbmcta2V5" not in message and server.key not in message  # type: ignore[attr-defined]


def test_prepare_and_info_on_a_cloud_prefix(
    cloud: tuple[str, object], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = tmp_path / "raw"
    write_captioning_shards(raw, 60, 20, image_size=(16, 16), with_json=True)
    url = _copy(cloud, raw)
    args = ["prepare", "--non-interactive", "--split-ratio", "2,1", "--num-workers", "2",
            "--sample-type", "CaptioningSample", "--field-map", '{"image": "jpg", "caption": "txt"}']  # fmt: skip
    assert cli_main([*args, url]) == 0
    # the remote index is the one a local prepare writes
    make_dataset(local := tmp_path / "local", 60, 20, split_ratio=[("train", 2), ("val", 1)])
    remote_index = ops.read_range_all(RemotePath(f"{url}/parts/data-1.tar.idx"))
    assert remote_index == (local / "parts" / "data-1.tar.idx").read_bytes()
    capsys.readouterr()
    assert cli_main(["info", url]) == 0
    info = capsys.readouterr().out
    assert "total: 60 samples, 3 shards" in info and "split train: 40 samples" in info
    assert len(take(_train(url), 4)) == 4


@pytest.mark.timeout(600)  # a hang guard only (a loaded machine is slow)
def test_a_store_that_is_down_fails_after_our_counted_retries(
    cloud: tuple[str, object], cloud_ds: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client libraries' own retry loops are off: each attempt is one of ours, counted,
    and the error names the object after the attempts are spent."""
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    name, server = cloud
    if name == "az":
        down = server.connection_string.replace(f":{server.port}/", f":{port}/")  # type: ignore[attr-defined]
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", down)
    else:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("ENERGON_LITE_REMOTE_ATTEMPTS", "2")
    before = STATS.snapshot()
    with pytest.raises(RemoteStorageError, match=rf"{cloud_ds}/parts/data-3\.tar: read failed after 2 attempts"):  # fmt: skip
        ops.read_range_all(RemotePath(f"{cloud_ds}/parts/data-3.tar"))
    assert STATS.retries - before["retries"] == 1
    assert STATS.requests - before["requests"] == 2
