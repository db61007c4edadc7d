"""``dss://NAME@VERSION/...`` paths: Energon's dataset-service names for folders of the local
dataset cache (``NVDATASET_CACHE_DIR``), as ``EPath``s (megatron-energon's ``EPath`` is the
oracle) and as metadataset paths."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import make_dataset

from energon_lite import WorkerConfig, get_train_dataset
from energon_lite.epathlib import EPath
from energon_lite.errors import ConfigError


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "nvds_cache"
    media = root / "charts" / "v0" / "images"
    media.mkdir(parents=True)
    for name in ("000.jpg", "001.jpg", "002.txt"):
        (media / name).write_bytes(name.encode())
    (root / "charts" / "v0" / "linked").symlink_to(media, target_is_directory=True)
    monkeypatch.setenv("NVDATASET_CACHE_DIR", str(root))
    return root


def _views(cls: type) -> list[object]:
    root = cls("dss://charts@v0")
    jpgs = sorted(root.glob("**/*.jpg"))
    inner = root / "images" / "../images/001.jpg"
    return [
        [str(p) for p in jpgs],
        [p.relative_to(root) for p in jpgs],
        sorted(str(p) for p in (root / "linked").walk()),
        [str(p) for p in sorted(root.glob("linked/*.txt"))],
        [str(inner), inner.url, inner.name, str(inner.parent), root.display_name],
        [inner.read_bytes(), inner.is_file(), (root / "images").is_dir(), inner.is_local()],
    ]


def test_dss_paths_behave_as_energons(cache: Path) -> None:
    epath = pytest.importorskip("megatron.energon.epathlib.epath")
    ours = _views(EPath)
    assert ours[0] == [
        "dss://charts@v0/images/000.jpg",
        "dss://charts@v0/images/001.jpg",
        "dss://charts@v0/linked/000.jpg",
        "dss://charts@v0/linked/001.jpg",
    ]
    assert (
        EPath("dss://charts@v0/images/000.jpg").local_path() == cache / "charts/v0/images/000.jpg"
    )
    saved = epath.NVDATASET_CACHE_DIR
    epath.NVDATASET_CACHE_DIR = epath.EPath(cache)
    try:
        assert ours == _views(epath.EPath)
    finally:
        epath.NVDATASET_CACHE_DIR = saved


def test_a_dss_path_needs_a_version_and_a_cache(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(AssertionError, match="must include a dataset version separated by '@'"):
        EPath("dss://charts")
    with pytest.raises(ConfigError, match="'dss://charts'"):
        EPath("dss://charts")  # also a ConfigError, naming the path
    monkeypatch.delenv("NVDATASET_CACHE_DIR")
    with pytest.raises(ConfigError, match="set NVDATASET_CACHE_DIR"):
        EPath("dss://charts@v0")


def test_a_metadataset_reads_a_dss_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_dataset(tmp_path / "cache" / "captions" / "v1", num_samples=20, samples_per_shard=10)
    monkeypatch.setenv("NVDATASET_CACHE_DIR", str(tmp_path / "cache"))
    mds = tmp_path / "mds.yaml"
    mds.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n"
        "  train:\n    path: dss://captions@v1\n"
    )
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    dataset = get_train_dataset(
        mds, worker_config=wc, batch_size=4, shuffle_buffer_size=None,
        max_samples_per_sequence=None,
    )  # fmt: skip
    keys = [key for _, batch in zip(range(5), dataset) for key in batch.__key__]
    assert len(set(keys)) == 20
