"""A prepared Hub-layout Parquet folder read from a real moto S3 server on 127.0.0.1: footers and
row groups by ranged reads, the same samples as the local copy, and exact resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import s3_fixtures
from conftest import installed_or_skip

from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset
from energon_lite.cli.main import main
from energon_lite.sources.kinds import kind_of
from energon_lite.synth.tables import caption_rows, write_hf_parquet
from energon_lite.testing import assert_loader_resumes

installed_or_skip("moto", "s3fs", "pyarrow", "datasets")

s3, proxy, env = s3_fixtures.s3, s3_fixtures.proxy, s3_fixtures.env


@pytest.fixture(scope="module")
def local_hub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = write_hf_parquet(
        tmp_path_factory.mktemp("hub") / "hub", caption_rows(30), files=2, rows_per_group=4
    )
    field_map = json.dumps({"image": "image", "caption": "caption"})
    main(["prepare", "--sample-type", "CaptioningSample", "--field-map", field_map, str(folder)])
    return folder


def _loader(path, workers: int):
    dataset = get_train_dataset(
        path,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=workers),
        batch_size=5,
        shuffle_buffer_size=6,
        max_samples_per_sequence=4,
        repeat=False,
    )
    return get_savable_loader(dataset)


def _captions(path, workers: int) -> list[tuple[str, str]]:
    return [(k, c) for b in _loader(path, workers) for k, c in zip(b.__key__, b.caption)]


def test_a_remote_parquet_folder_gives_the_local_samples(s3, proxy, local_hub):
    s3.upload(local_hub, "tables", "same")
    url = "s3://tables/same"
    assert kind_of(url).name == "parquet"
    before = len(proxy.log)
    remote = _captions(url, 2)
    assert remote == _captions(local_hub, 2) and len(remote) == 30
    gets = [
        status
        for method, path, status, _ in proxy.log[before:]
        if method == "GET" and path.split("?")[0].endswith(".parquet")
    ]
    assert gets and set(gets) == {206}  # the files were read through the proxy, by ranges


def test_a_remote_parquet_folder_resumes_exactly(s3, local_hub):
    s3.upload(local_hub, "tables", "resume")
    assert_loader_resumes(lambda: _loader("s3://tables/resume", 2), 6, [0, 3])
