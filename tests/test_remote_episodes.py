"""Robot-episode folders (HDF5) read from object storage (moto's S3 server on 127.0.0.1):
indexed and read through ranged reads, giving the same index and batches as the local copy.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import installed_or_skip
from s3_fixtures import point_aws_at

from energon_lite.flavors.episodes import (
    compute_norm_stats,
    create_qc_dataloader_v3,
    load_episode_index,
    prepare_episodes,
)
from energon_lite.flavors.episodes.index import INDEX_PATH
from energon_lite.storage import STATS, RangedFile, RemotePath
from energon_lite.storage.ops import ObjectChangedError
from energon_lite.synth.episodes import write_dataset
from energon_lite.synth.servers import S3Server

installed_or_skip("moto", "s3fs", "h5py")

LENGTHS = [5, 3, 8, 2, 6, 4, 1, 7]
CAMS = ["cam_high", "cam_left_wrist"]
pytestmark = pytest.mark.filterwarnings("ignore:steps_per_epoch=")


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with S3Server() as server:
        yield server


@pytest.fixture(autouse=True)
def aws_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    point_aws_at(s3.endpoint, monkeypatch, tmp_path / "cache")


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("remote_eps") / "eps"
    return write_dataset(folder, LENGTHS, images="jpeg", image_size=(8, 8))


@pytest.fixture(scope="module")
def remote(s3: S3Server, local: Path) -> str:
    prefix = f"eps-{uuid.uuid4().hex[:8]}"
    s3.upload(local, "data", prefix)
    return f"s3://data/{prefix}"


def test_a_remote_episode_folder_is_indexed_by_ranged_reads(s3: S3Server, tmp_path: Path) -> None:
    """Indexing reads each episode's HDF5 metadata by range, not its frames."""
    big = write_dataset(tmp_path / "big", [100, 80, 90], images="raw", image_size=(96, 128))
    prefix = f"big-{uuid.uuid4().hex[:8]}"
    s3.upload(big, "data", prefix)
    before = STATS.snapshot()
    written = prepare_episodes(f"s3://data/{prefix}", progress=False)
    assert written == RemotePath(f"s3://data/{prefix}/{INDEX_PATH}")
    fetched = STATS.bytes - before["bytes"]
    total = sum(p.stat().st_size for p in big.glob("*.hdf5"))
    assert 0 < fetched < total / 2
    index = load_episode_index(f"s3://data/{prefix}")
    prepare_episodes(big, progress=False)
    expected = load_episode_index(big)
    assert index.paths.tolist() == expected.paths.tolist()
    assert index.lengths.tolist() == [100, 80, 90]
    assert index.labels.tolist() == expected.labels.tolist()
    assert index.fingerprint() == expected.fingerprint()


def _batches(folder: str | Path, n: int = 4) -> list:
    args = {"episodes_per_epoch": 4, "batch_size": 3, "epoch_seed": 1, "positive_ratio": 0.5,
            "steps_per_epoch": 4, "num_workers": 2, "pin_memory": False}  # fmt: skip
    _, loader = create_qc_dataloader_v3(folder, CAMS, compute_norm_stats(folder), 5, **args)
    out = []
    for _, batch in zip(range(n), loader):
        out.append((batch["actions"].numpy(), batch["observations"]["images"].numpy()))
    return out


def test_remote_episodes_give_the_local_batches(local: Path, remote: str) -> None:
    prepare_episodes(remote, progress=False)
    prepare_episodes(local, progress=False)
    for (actions, images), (want_actions, want_images) in zip(
        _batches(remote), _batches(local), strict=True
    ):
        assert np.array_equal(actions, want_actions)
        assert np.array_equal(images, want_images)


def test_a_ranged_file_reads_by_range_pinned_to_its_version(s3: S3Server) -> None:
    """Seek and read anywhere (each window one ranged GET); an object replaced by one of
    the same size is refused at the next GET, never mixed into what was read."""
    key = f"blobs/{uuid.uuid4().hex[:8]}.bin"
    data = np.random.default_rng(0).integers(0, 256, 3 << 20, dtype=np.uint8).tobytes()
    s3.client().put_object(Bucket="data", Key=key, Body=data)
    before = STATS.snapshot()
    with RangedFile(RemotePath(f"s3://data/{key}")) as file:
        assert file.read(64) == data[:64]
        file.seek(-100, 2)
        assert file.read() == data[-100:]
        assert file.tell() == len(data)
        gets = STATS.requests - before["requests"]
        assert gets <= 4  # listing, 2 windows (and the version's listing entry)
        s3.client().put_object(Bucket="data", Key=key, Body=data[::-1])  # same size
        file.seek(len(data) // 2)  # a window not fetched yet
        with pytest.raises(ObjectChangedError, match=r"\.bin: the object changed"):
            file.read(10)
