"""Prepared JSONL files read from a real moto S3 server on 127.0.0.1: the same samples and
states as the local copy, through the node-local shard cache, retried and version-pinned."""

from __future__ import annotations

from pathlib import Path

import pytest
import s3_fixtures
from conftest import installed_or_skip

from energon_lite import (
    Cooker,
    DefaultTaskEncoder,
    TextSample,
    WorkerConfig,
    basic_sample_keys,
    get_savable_loader,
    get_train_dataset,
    get_val_dataset,
)
from energon_lite.errors import DatasetFormatError
from energon_lite.flavors.jsonl import prepare_lines
from energon_lite.synth.lines import write_caption_jsonl
from energon_lite.synth.servers import FaultProxy, S3Server
from energon_lite.testing import assert_loader_resumes

installed_or_skip("moto", "s3fs")

# the moto server, the counting proxy and each test's environment (tests/s3_fixtures.py)
s3, proxy, env = s3_fixtures.s3, s3_fixtures.proxy, s3_fixtures.env


def cook(sample: dict) -> TextSample:
    return TextSample(**basic_sample_keys(sample), text=sample["json"]["caption"])


class Lines(DefaultTaskEncoder):
    cookers = (Cooker(cook),)


@pytest.fixture(scope="module")
def local_jsonl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = write_caption_jsonl(tmp_path_factory.mktemp("lines") / "captions.jsonl", 300)
    prepare_lines(path, progress=False)
    return path


def _upload(s3: S3Server, local: Path, prefix: str) -> str:
    s3.upload(local.parent, "lines", prefix)
    return f"s3://lines/{prefix}/{local.name}"


def _keys(path, num_workers: int = 0) -> list[tuple[str, str]]:
    wc = WorkerConfig(rank=0, world_size=1, num_workers=num_workers)
    ds = get_val_dataset(
        path, worker_config=wc, batch_size=10, split_part="train", task_encoder=Lines()
    )
    return [(k, t) for b in get_savable_loader(ds) for k, t in zip(b.__key__, b.text)]


def _data_gets(proxy: FaultProxy, since: int, name: str) -> int:
    return sum(
        1 for m, p, _, _ in proxy.log[since:] if m == "GET" and p.split("?")[0].endswith(name)
    )


def test_a_remote_jsonl_gives_the_local_samples(s3, local_jsonl):
    url = _upload(s3, local_jsonl, "same")
    for workers in (0, 2):
        remote = _keys(url, workers)
        assert remote == _keys(local_jsonl, workers) and len(remote) == 300


def test_a_remote_jsonl_resumes_exactly(s3, local_jsonl):
    url = _upload(s3, local_jsonl, "resume")

    def make_loader():
        wc = WorkerConfig(rank=0, world_size=1, num_workers=2)
        ds = get_train_dataset(
            url, worker_config=wc, batch_size=4, shuffle_buffer_size=10,
            max_samples_per_sequence=8, task_encoder=Lines(),
        )  # fmt: skip
        return get_savable_loader(ds)

    assert_loader_resumes(make_loader, total=30, save_points=[0, 11, 23])


def test_a_remote_jsonl_is_read_through_the_shard_cache(s3, proxy, local_jsonl, monkeypatch):
    monkeypatch.setenv("ENERGON_LITE_CACHE_LIMIT", "100MB")
    url = _upload(s3, local_jsonl, "cached")
    expected = _keys(local_jsonl, 2)
    start = len(proxy.log)
    assert _keys(url, 2) == expected
    assert _data_gets(proxy, start, "captions.jsonl") == 1  # the file, fetched whole once
    start = len(proxy.log)
    assert _keys(url, 2) == expected
    assert _data_gets(proxy, start, "captions.jsonl") == 0


def test_a_changed_remote_jsonl_is_refused(s3, local_jsonl, tmp_path):
    url = _upload(s3, local_jsonl, "changed")
    data = bytearray(local_jsonl.read_bytes())
    at = data.index(b"caption") + 1
    data[at] = ord("X")  # same size: the index still fits, the sampled digest does not
    changed = tmp_path / "captions.jsonl"
    changed.write_bytes(bytes(data))
    s3.client().upload_file(str(changed), "lines", "changed/captions.jsonl")
    with pytest.raises(DatasetFormatError, match="content changed since it was prepared"):
        _keys(url)
