"""Prepare in journaled batches: resumable on object storage (moto's S3 server), and as tasks
on a local Ray (``num_cpus=2``), also reached by ``ray.init(address=...)`` from another process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import installed_or_skip, make_dataset
from s3_fixtures import point_aws_at

from energon_lite import prepare_dataset
from energon_lite.cli import main as cli_main
from energon_lite.errors import DatasetFormatError
from energon_lite.shards.meta import META_DIR
from energon_lite.shards.prepare_journal import JOURNAL_DIR
from energon_lite.shards.tar_index import scan_shard
from energon_lite.synth.servers import S3Server
from energon_lite.synth.shards import write_captioning_shards

installed_or_skip("moto", "s3fs")

OPTIONS = {"split_ratio": [("train", 1)], "sample_type": "CaptioningSample",
           "field_map": {"image": "jpg", "caption": "txt"}, "progress": False}  # fmt: skip


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with S3Server() as server:
        yield server


@pytest.fixture(autouse=True)
def aws_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    point_aws_at(s3.endpoint, monkeypatch, tmp_path / "cache")
    monkeypatch.setenv("ENERGON_LITE_PREPARE_BATCH", "2")


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """10 shards of 6 samples, not prepared."""
    folder = tmp_path_factory.mktemp("cluster_raw")
    write_captioning_shards(folder, 60, 6, image_size=(8, 8), with_json=True)
    return folder


@pytest.fixture(scope="module")
def local_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same shards, prepared locally: the indexes every other prepare must write."""
    return make_dataset(tmp_path_factory.mktemp("cluster_local") / "ds", 60, 6)


def _keys(s3: S3Server, prefix: str) -> set[str]:
    listed = s3.client().list_objects_v2(Bucket="data", Prefix=prefix + "/").get("Contents", [])
    return {o["Key"][len(prefix) + 1 :] for o in listed}


def _get(s3: S3Server, key: str) -> bytes:
    return s3.client().get_object(Bucket="data", Key=key)["Body"].read()


def _break_last_shard(s3: S3Server, raw: Path) -> str:
    """A copy of ``raw`` whose last shard is not a tar; returns its prefix."""
    prefix = f"raw-{uuid.uuid4().hex[:8]}"
    s3.upload(raw, "data", prefix)
    last = sorted(raw.glob("parts/*.tar"))[-1].name
    s3.client().put_object(Bucket="data", Key=f"{prefix}/parts/{last}", Body=b"not a tar" * 200)
    return prefix


def _assert_prepared_like(s3: S3Server, prefix: str, local_ds: Path) -> None:
    keys = _keys(s3, prefix)
    assert f"{META_DIR}/.info.json" in keys
    assert not any(k.startswith(JOURNAL_DIR) for k in keys)  # the journal went with the commit
    for index in sorted(local_ds.glob("parts/*.tar.idx")):
        assert _get(s3, f"{prefix}/parts/{index.name}") == index.read_bytes(), index.name


def _resume(s3: S3Server, raw: Path, local_ds: Path, **options) -> None:
    prefix = _break_last_shard(s3, raw)
    with pytest.raises(DatasetFormatError, match=r"data-9\.tar"):
        prepare_dataset(f"s3://data/{prefix}", **OPTIONS, **options)
    keys = _keys(s3, prefix)
    assert not any(k.startswith(META_DIR) or k.endswith(".idx") for k in keys)
    assert len([k for k in keys if k.startswith(JOURNAL_DIR)]) == 4  # batches 0-3 of 2 shards
    s3.upload(raw / "parts", "data", f"{prefix}/parts")  # the shard is mended
    report = prepare_dataset(f"s3://data/{prefix}", **OPTIONS, **options)
    assert report.resumed == 8  # only the last batch was scanned again
    assert report.num_samples == 60
    _assert_prepared_like(s3, prefix, local_ds)


def test_a_remote_prepare_that_died_rescans_only_unfinished_shards(
    s3: S3Server, raw: Path, local_ds: Path
) -> None:
    _resume(s3, raw, local_ds)


def test_a_changed_shard_is_scanned_again_not_taken_from_the_journal(
    s3: S3Server, raw: Path, tmp_path: Path
) -> None:
    prefix = _break_last_shard(s3, raw)
    with pytest.raises(DatasetFormatError):
        prepare_dataset(f"s3://data/{prefix}", **OPTIONS)
    s3.upload(raw / "parts", "data", f"{prefix}/parts")  # the last shard mended (same bytes)
    write_captioning_shards(tmp_path / "other", 5, 5, image_size=(8, 8), with_json=True)
    replacement = next((tmp_path / "other").glob("parts/*.tar"))
    s3.client().put_object(Bucket="data", Key=f"{prefix}/parts/data-0.tar",
                           Body=replacement.read_bytes())  # fmt: skip
    report = prepare_dataset(f"s3://data/{prefix}", **OPTIONS, allow_duplicate_keys=True)
    assert report.resumed == 6  # batches 1-3; batch 0 (the replaced shard's) and 4 scanned
    assert report.shard_counts[0] == 5
    expected = scan_shard(replacement).offsets.astype("<u8").tobytes()
    assert _get(s3, f"{prefix}/parts/data-0.tar.idx") == expected


# --- Ray ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """A local Ray with 2 CPUs for the module; yields its address."""
    ray = pytest.importorskip("ray", reason="--executor ray needs Ray: pip install 'energon-lite[ray]'")  # fmt: skip
    context = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield context.address_info["gcs_address"]
    finally:
        ray.shutdown()


def test_ray_prepare_of_an_s3_prefix_writes_the_local_indexes(
    ray_cluster: str, s3: S3Server, raw: Path, local_ds: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = f"ray-{uuid.uuid4().hex[:8]}"
    s3.upload(raw, "data", prefix)
    args = ["prepare", "--non-interactive", "--executor", "ray", "--num-workers", "2",
            "--split-ratio", "1", "--sample-type", "CaptioningSample",
            "--field-map", '{"image": "jpg", "caption": "txt"}', f"s3://data/{prefix}"]  # fmt: skip
    assert cli_main(args) == 0
    assert "Prepared 60 samples in 10 shards" in capsys.readouterr().out
    _assert_prepared_like(s3, prefix, local_ds)


def test_a_ray_prepare_that_died_rescans_only_unfinished_shards(
    ray_cluster: str, s3: S3Server, raw: Path, local_ds: Path
) -> None:
    _resume(s3, raw, local_ds, executor="ray", num_workers=2)


def test_ray_address_reaches_a_running_cluster_from_another_process(
    ray_cluster: str, tmp_path: Path, raw: Path, local_ds: Path
) -> None:
    folder = tmp_path / "ds"
    subprocess.run(["cp", "-r", str(raw), str(folder)], check=True, timeout=60)
    args = [sys.executable, "-m", "energon_lite.cli", "prepare", "--non-interactive",
            "--executor", "ray", "--ray-address", ray_cluster, "--split-ratio", "1",
            "--sample-type", "CaptioningSample", "--field-map",
            '{"image": "jpg", "caption": "txt"}', str(folder)]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(args, capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Prepared 60 samples in 10 shards" in done.stdout
    assert not (folder / JOURNAL_DIR).exists()
    for index in sorted(local_ds.glob("parts/*.tar.idx")):
        assert (folder / "parts" / index.name).read_bytes() == index.read_bytes()
