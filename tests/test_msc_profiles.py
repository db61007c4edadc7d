"""``msc://`` through the multi-storage-client package: a POSIX (``file``) profile, an S3 profile
against moto's server (behind a counting proxy), an Azure profile against Azurite (skipped
where Azurite is not installed) and a GCS profile against fake-gcs-server, all on 127.0.0.1.

Each copy gives the keys and pixels of the local dataset; what energon_lite adds on top of
MSC's client is checked where it shows: faults retried and counted by energon_lite (MSC's own
retry loop makes one attempt), GETs conditional on the version pinned at open (a replaced
shard stops the run), a warm epoch served by the node-local shard cache, and errors that name
the configuration file and the profiles in it, never a secret.
"""

from __future__ import annotations

import io
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from conftest import installed_or_skip, make_dataset
from s3_fixtures import env, proxy, s3  # noqa: F401 (fixtures: moto, its counting proxy, env)
from test_remote import _keys_and_pixels, _train

from energon_lite import prepare_dataset
from energon_lite.cache import SystemFileStore
from energon_lite.cli.main import main as cli_main
from energon_lite.errors import ConfigError, DatasetFormatError, EnergonLiteError
from energon_lite.media import ImageMetadata
from energon_lite.storage import STATS, RemotePath, ranged, reset_session
from energon_lite.synth.servers import TEST_CREDENTIALS, FaultProxy, S3Server
from energon_lite.synth.shards import make_image
from energon_lite.testing import assert_loader_resumes, take

installed_or_skip("multistorageclient", "moto", "s3fs")

SECRET = TEST_CREDENTIALS["secret"]
BUCKET = "mscdata"


@pytest.fixture(scope="module")
def local_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """120 samples in 6 shards of 20, all in train."""
    return make_dataset(tmp_path_factory.mktemp("msc_local") / "ds")


@pytest.fixture
def no_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    """No AWS variables: an S3 profile must bring its own endpoint and credentials."""
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)


def _configure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, profiles: dict) -> Path:
    path = tmp_path / "msc_config.yaml"
    path.write_text(yaml.safe_dump({"profiles": profiles}))
    monkeypatch.setenv("MSC_CONFIG", str(path))
    monkeypatch.setenv("MSC_TEST_SECRET", SECRET)  # the config names it as ${MSC_TEST_SECRET}
    return path


def _s3_profile(endpoint: str, base_path: str) -> dict:
    return {
        "storage_provider": {
            "type": "s3",
            "options": {
                "base_path": base_path,
                "endpoint_url": endpoint,
                "region_name": "us-east-1",
            },
        },
        "credentials_provider": {
            "type": "S3Credentials",
            "options": {"access_key": TEST_CREDENTIALS["key"], "secret_key": "${MSC_TEST_SECRET}"},
        },
    }


def _shards_only(local_ds: Path, dest: Path) -> Path:
    """The dataset's tar shards without ``.nv-meta``: a folder still to be prepared."""
    shutil.copytree(local_ds, dest, ignore=shutil.ignore_patterns(".nv-meta"))
    return dest


def _prepare(path: str) -> None:
    prepare_dataset(
        path,
        split_ratio=[("train", 1)],
        sample_type="CaptioningSample",
        field_map={"image": "jpg", "caption": "txt"},
        progress=False,
    )


def _shard_gets(log: list[tuple[str, str, int, int]]) -> int:
    return sum(
        1 for method, path, _, _ in log if method == "GET" and path.split("?")[0].endswith(".tar")
    )


# POSIX ------------------------------------------------------------------------------------


def test_posix_profile_reads_and_prepares_in_place(
    local_ds: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    shutil.copytree(local_ds, store / "ds")
    _shards_only(local_ds, store / "raw")
    profile = {"storage_provider": {"type": "file", "options": {"base_path": str(store)}}}
    _configure(tmp_path, monkeypatch, {"files": profile})
    assert [_keys_and_pixels(b) for b in take(_train("msc://files/ds", 2), 8)] == [
        _keys_and_pixels(b) for b in take(_train(local_ds, 2), 8)
    ]
    local = [_keys_and_pixels(b) for b in take(_train(local_ds), 8)]
    _prepare("msc://files/raw")  # written through MSC into the profile's folder
    assert (store / "raw" / ".nv-meta" / ".info.json").is_file()
    assert [_keys_and_pixels(b) for b in take(_train("msc://files/raw"), 8)] == local


# S3 (moto behind the counting proxy) --------------------------------------------------------


@pytest.fixture(scope="module")
def s3_prefix(s3: S3Server, local_ds: Path) -> str:  # noqa: F811 (the imported fixture)
    prefix = f"copies-{uuid.uuid4().hex[:8]}"
    s3.upload(local_ds, BUCKET, f"{prefix}/ds")
    return prefix


@pytest.fixture
def s3_copy(
    s3_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_aws: None
) -> Callable[[str], str]:
    """The ``msc://`` URL of the module's S3 copy through a profile over ``endpoint`` (the
    server itself or a proxy in front of it), the only place its endpoint and keys are named."""

    def url(endpoint: str) -> str:
        _configure(tmp_path, monkeypatch, {"copy": _s3_profile(endpoint, f"{BUCKET}/{s3_prefix}")})
        return "msc://copy/ds"

    return url


def test_s3_profile_reads_resumes_and_goes_through_its_endpoint(
    proxy: FaultProxy,  # noqa: F811
    local_ds: Path,
    s3_copy: Callable[[str], str],
) -> None:
    url = s3_copy(proxy.endpoint)
    local = [_keys_and_pixels(b) for b in take(_train(local_ds, 2), 12)]
    start = len(proxy.log)
    assert [_keys_and_pixels(b) for b in take(_train(url, 2), 12)] == local
    assert _shard_gets(proxy.log[start:]) >= 6  # the profile's endpoint served the shards
    assert_loader_resumes(lambda: _train(url), total=12, save_points=[0, 5], key=_keys_and_pixels)


def test_s3_profile_faults_are_retried_and_counted_by_energon_lite(
    s3: S3Server,  # noqa: F811
    local_ds: Path,
    s3_copy: Callable[[str], str],
) -> None:
    """The first GET of every shard (a pinned ranged read) and of every index (MSC's own read),
    and the first folder listing, answer 503 SlowDown: each is retried once, by energon_lite
    (counted in STATS), not by MSC's or botocore's loops (which would hide it)."""
    answered: set[str] = set()

    def slow_down_once(n: int, path: str) -> str | None:
        name = path.split("?")[0] if ".tar" in path else "a listing" * ("list-type=2" in path)
        if name and name not in answered:
            answered.add(name)
            return "503"
        return None

    with FaultProxy(s3.endpoint, schedule=slow_down_once) as faulty:
        url = s3_copy(faulty.endpoint)
        before = STATS.retries
        keys = [_keys_and_pixels(b) for b in take(_train(url), 15)]
        assert faulty.counts["503"] == 6 + 6 + 1
    assert keys == [_keys_and_pixels(b) for b in take(_train(local_ds), 15)]
    assert STATS.retries - before == 6 + 6 + 1


def test_s3_profile_warm_epoch_is_served_by_the_node_cache(
    proxy: FaultProxy,  # noqa: F811
    local_ds: Path,
    s3_copy: Callable[[str], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ENERGON_LITE_CACHE_LIMIT", "1GB")
    url = s3_copy(proxy.endpoint)
    local = [_keys_and_pixels(b) for b in take(_train(local_ds), 15)]
    start = len(proxy.log)
    assert [_keys_and_pixels(b) for b in take(_train(url), 15)] == local
    assert _shard_gets(proxy.log[start:]) == 6  # each shard fetched whole, once
    assert len(list((tmp_path / "cache" / "shards").glob("*.data"))) == 6
    start = len(proxy.log)
    assert [_keys_and_pixels(b) for b in take(_train(url), 15)] == local
    assert _shard_gets(proxy.log[start:]) == 0


def test_s3_profile_prepares_a_folder_of_shards(
    s3: S3Server,  # noqa: F811
    local_ds: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_aws: None,
) -> None:
    prefix = f"raw-{uuid.uuid4().hex[:8]}"
    s3.upload(_shards_only(local_ds, tmp_path / "raw"), BUCKET, prefix)
    _configure(tmp_path, monkeypatch, {"raw": _s3_profile(s3.endpoint, BUCKET)})
    _prepare(f"msc://raw/{prefix}")
    keys = s3.client().list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/.nv-meta/")["Contents"]
    assert {f"{prefix}/.nv-meta/.info.json", f"{prefix}/.nv-meta/split.yaml"} <= {
        k["Key"] for k in keys
    }
    local = [_keys_and_pixels(b) for b in take(_train(local_ds), 8)]
    assert [_keys_and_pixels(b) for b in take(_train(f"msc://raw/{prefix}"), 8)] == local


def test_prepare_media_on_a_plain_msc_folder(
    s3: S3Server,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_aws: None,
) -> None:
    """``energon-lite prepare-media msc://...`` on a folder of files (not a prepared dataset):
    the table is written beside them, and a file store over the folder reads it back."""
    folder = tmp_path / "media"
    folder.mkdir()
    for name, size, fmt in (("a/image000.jpg", (32, 16), "JPEG"), ("image001.png", (24, 24), "PNG")):  # fmt: skip
        buffer = io.BytesIO()
        make_image(1, size).save(buffer, format=fmt)
        (folder / name).parent.mkdir(exist_ok=True)
        (folder / name).write_bytes(buffer.getvalue())
    (folder / "notes.txt").write_text("not media")
    prefix = f"media-{uuid.uuid4().hex[:8]}"
    s3.upload(folder, BUCKET, prefix)
    _configure(tmp_path, monkeypatch, {"media": _s3_profile(s3.endpoint, BUCKET)})
    url = f"msc://media/{prefix}"
    assert cli_main(["prepare-media", url, "--media-metadata-by-extension"]) == 0
    assert f"in {url}/.nv-meta" in capsys.readouterr().out
    store = SystemFileStore(url)
    assert store.get_media_metadata("a/image000.jpg") == ImageMetadata(
        width=32, height=16, format="JPEG", mode="RGB"
    )
    assert store.get_media_metadata("image001.png").width == 24
    with pytest.raises(KeyError):
        store.get_media_metadata("notes.txt")
    with pytest.raises(DatasetFormatError, match="prepare-media"):
        SystemFileStore(f"{url}/a").get_media_metadata("image000.jpg")


def test_profile_errors_name_the_file_and_profiles_never_a_secret(
    s3: S3Server,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_aws: None,
) -> None:
    config = _configure(tmp_path, monkeypatch, {"known": _s3_profile(s3.endpoint, BUCKET)})
    with pytest.raises(ConfigError) as info:
        _train("msc://unknown/ds")
    assert str(config) in str(info.value) and "'unknown'" in str(info.value)
    assert "known" in str(info.value)
    with pytest.raises(EnergonLiteError) as info:
        _train("msc://known/nothing/here")
    assert "msc://known/nothing/here" in str(info.value) and SECRET not in str(info.value)
    with pytest.raises(ConfigError, match="storage_options"):
        _train(RemotePath("msc://known/ds", storage_options={"key": "k"}))
    bad = {"odd": {"storage_provider": {"type": "no-such-kind", "options": {"base_path": "x"}}}}
    config = _configure(tmp_path, monkeypatch, bad)
    with pytest.raises(ConfigError, match="odd"):
        _train("msc://odd/ds")


# Azure (Azurite) ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def azurite() -> Iterator[object]:
    pytest.importorskip("azure.storage.blob", reason="an Azure profile needs azure-storage-blob")
    from energon_lite.synth.cloud_servers import AzuriteServer

    try:
        server = AzuriteServer()
    except FileNotFoundError as exc:
        pytest.skip(f"the Azure profile test needs Azurite: {exc}")
    with server:
        yield server


def test_azure_profile_reads_and_pins_each_blob(
    azurite: object,
    local_ds: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from energon_lite.synth.cloud_servers import AzuriteServer

    assert isinstance(azurite, AzuriteServer)
    prefix = f"ds-{uuid.uuid4().hex[:8]}"
    azurite.upload(local_ds, "data", prefix)
    monkeypatch.setenv("AZ_CONNECTION", azurite.connection_string)
    profile = {
        "storage_provider": {
            "type": "azure",
            "options": {"endpoint_url": azurite.endpoint, "base_path": "data"},
        },
        "credentials_provider": {
            "type": "AzureCredentials",
            "options": {"connection": "${AZ_CONNECTION}"},
        },
    }
    _configure(tmp_path, monkeypatch, {"blobs": profile})
    url = f"msc://blobs/{prefix}"
    local = [_keys_and_pixels(b) for b in take(_train(local_ds, 2), 8)]
    assert [_keys_and_pixels(b) for b in take(_train(url, 2), 8)] == local
    assert_loader_resumes(lambda: _train(url), total=8, save_points=[0, 5], key=_keys_and_pixels)
    with pytest.raises(EnergonLiteError) as info:
        _train(f"msc://blobs/{prefix}-missing")
    assert azurite.key not in str(info.value)

    # every shard replaced by other bytes of the same size while the loader reads
    reset_session()
    monkeypatch.setattr(ranged, "READAHEAD", 4096)  # a GET per few samples, not per shard
    batches = iter(_train(url))
    next(batches)
    for shard in sorted((local_ds / "parts").glob("*.tar")):
        data = bytearray(shard.read_bytes())
        data[600:-1100] = bytes(data[600:-1100])[::-1]
        azurite.put("data", f"{prefix}/parts/{shard.name}", bytes(data))
    with pytest.raises(DatasetFormatError, match=rf"msc://blobs/{prefix}/parts/data-.*changed"):
        for _ in batches:
            pass


# GCS (fake-gcs-server) ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake_gcs() -> Iterator[object]:
    pytest.importorskip("google.cloud.storage", reason="a GCS profile needs google-cloud-storage")
    from energon_lite.synth.cloud_servers import GcsServer

    try:
        server = GcsServer()
    except FileNotFoundError as exc:
        pytest.skip(f"the GCS profile test needs fake-gcs-server: {exc}")
    with server:
        yield server


def test_gcs_profile_reads_and_resumes(
    fake_gcs: object, local_ds: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``gcs`` profile (MSC's google-cloud-storage provider; anonymous, as the emulator
    checks no credentials): the same keys and pixels, and exact resume."""
    from energon_lite.synth.cloud_servers import GcsServer

    assert isinstance(fake_gcs, GcsServer)
    prefix = f"ds-{uuid.uuid4().hex[:8]}"
    fake_gcs.upload(local_ds, "gcsdata", prefix)
    options = {"endpoint_url": fake_gcs.endpoint, "base_path": "gcsdata", "project_id": "test",
               "skip_signature": True}  # fmt: skip
    _configure(tmp_path, monkeypatch, {"gcs": {"storage_provider": {"type": "gcs", "options": options}}})  # fmt: skip
    url = f"msc://gcs/{prefix}"
    local = [_keys_and_pixels(b) for b in take(_train(local_ds, 2), 8)]
    assert [_keys_and_pixels(b) for b in take(_train(url, 2), 8)] == local
    assert_loader_resumes(lambda: _train(url), total=8, save_points=[0, 5], key=_keys_and_pixels)
