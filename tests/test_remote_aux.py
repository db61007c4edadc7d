"""``aux:`` sources on remote storage (a prepared tar folder and a prepared .jsonl in a real
moto S3 bucket on 127.0.0.1): cookers read them by name as from local copies, through the
node-local shard cache when it is on, and a run resumes exactly."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import s3_fixtures
from conftest import installed_or_skip
from test_crude import _crude_dataset

from energon_lite import (
    Cooker,
    DefaultTaskEncoder,
    TextSample,
    WorkerConfig,
    basic_sample_keys,
    get_loader,
    get_savable_loader,
    get_train_dataset,
)
from energon_lite.errors import DatasetFormatError
from energon_lite.flavors.jsonl import prepare_lines
from energon_lite.synth.lines import write_caption_jsonl
from energon_lite.synth.servers import S3Server, write_msc_config
from energon_lite.testing import assert_loader_resumes

installed_or_skip("moto", "s3fs")

# the moto server, the counting proxy and each test's environment (tests/s3_fixtures.py)
s3, proxy, env = s3_fixtures.s3, s3_fixtures.proxy, s3_fixtures.env

HEADER = "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"


def cook(sample: dict, pkl_source, captions) -> TextSample:
    other = pkl_source.get(f"{int(sample['txt']) + 100:06d}.txt", sample)
    line = captions.get(f"{int(sample['txt']) % 40}.json", sample)
    return TextSample(**basic_sample_keys(sample), text=f"<{sample['txt']}|{other}|{len(line)}>")


class Encoder(DefaultTaskEncoder):
    cookers = (Cooker(cook),)


@pytest.fixture(scope="module")
def folders(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ds1 (primary, local), ds2 and caps.jsonl (aux) locally and in s3://aux/; two YAMLs."""
    root = tmp_path_factory.mktemp("remote_aux")
    _crude_dataset(root / "ds1", 0)
    _crude_dataset(root / "ds2", 100)
    (root / "lines").mkdir()
    prepare_lines(write_caption_jsonl(root / "lines" / "caps.jsonl", 40), progress=False)
    s3.upload(root / "ds2", "aux", "ds2")
    s3.upload(root / "lines", "aux", "lines")
    (root / "local.yaml").write_text(
        HEADER
        + "    path: ds1\n    aux:\n      pkl_source: ds2\n      captions: lines/caps.jsonl\n"
    )
    (root / "remote.yaml").write_text(
        HEADER + "    path: ds1\n    aux:\n      pkl_source: s3://aux/ds2\n"
        "      captions: s3://aux/lines/caps.jsonl\n"
    )
    return root


def _train(path: Path, workers: int = 0):
    return get_train_dataset(
        path,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=workers),
        batch_size=2,
        shuffle_buffer_size=None,
        max_samples_per_sequence=5,
        task_encoder=Encoder(),
    )


def _texts(path: Path, workers: int = 0, n: int = 30) -> list[str]:
    return [t for _, b in zip(range(n), get_loader(_train(path, workers))) for t in b.text]


def test_remote_aux_sources_read_like_local_ones(folders):
    remote = _texts(folders / "remote.yaml", 2)
    assert remote == _texts(folders / "local.yaml", 2)
    for text in remote:
        m = re.fullmatch(r"<(\d+)\|(\d+)\|(\d+)>", text)
        assert m and int(m.group(2)) == int(m.group(1)) + 100


def test_remote_aux_resumes_exactly(folders):
    assert_loader_resumes(
        lambda: get_savable_loader(_train(folders / "remote.yaml", 2)),
        total=20,
        save_points=[0, 9],
    )


def test_remote_aux_reads_through_the_shard_cache(folders, proxy, monkeypatch):
    monkeypatch.setenv("ENERGON_LITE_CACHE_LIMIT", "50MB")
    expected = _texts(folders / "local.yaml")
    assert _texts(folders / "remote.yaml") == expected
    start = len(proxy.log)
    assert _texts(folders / "remote.yaml") == expected  # a new run on the same node
    data = [p for m, p, _, _ in proxy.log[start:] if m == "GET" and p.endswith((".tar", ".jsonl"))]
    assert data == []


def test_a_missing_remote_aux_source_is_named(folders, tmp_path):
    (tmp_path / "ds1").symlink_to(folders / "ds1")
    (tmp_path / "bad.yaml").write_text(
        HEADER + "    path: ds1\n    aux:\n      pkl_source: s3://aux/nothing-here\n"
        "      captions: s3://aux/lines/caps.jsonl\n"
    )
    with pytest.raises(DatasetFormatError, match="s3://aux/nothing-here"):
        _texts(tmp_path / "bad.yaml")


def cook_plain(sample: dict, pkl_source, fs_source) -> TextSample:
    note = fs_source.get("notes/hello.txt", sample)  # decoded by extension
    return TextSample(**basic_sample_keys(sample), text=f"<{sample['txt']}|{note}>")


class PlainEncoder(DefaultTaskEncoder):
    cookers = (Cooker(cook_plain),)


def test_a_plain_folder_on_remote_storage_is_an_aux_source(
    s3: S3Server, folders: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``filesystem+msc://profile/DIR`` and ``filesystem+s3://bucket/DIR`` name a plain
    folder on remote storage, and ``filesystem://DIR`` in a remote YAML a folder beside it,
    as in Energon: each file is read by name (before: refused as an unknown scheme, and
    ``filesystem://`` in a remote YAML as a local folder)."""
    plain = tmp_path / "plain"
    (plain / "notes").mkdir(parents=True)
    (plain / "notes" / "hello.txt").write_text("hello from a bucket")
    s3.upload(plain, "aux", "plain")
    s3.upload(folders / "ds1", "aux", "ds1")
    config = write_msc_config(tmp_path / "msc_config.yaml", "auxp", s3.endpoint, "aux", None)
    monkeypatch.setenv("MSC_CONFIG", str(config))
    (tmp_path / "ds1").symlink_to(folders / "ds1")
    (tmp_path / "ds2").symlink_to(folders / "ds2")
    yamls = {}
    for name, spec in (("msc", "filesystem+msc://auxp/plain"), ("s3", "filesystem+s3://aux/plain")):
        yamls[name] = tmp_path / f"{name}.yaml"
        yamls[name].write_text(
            HEADER + f"    path: ds1\n    aux:\n      pkl_source: ds2\n      fs_source: {spec}\n"
        )
    s3.client().put_object(
        Bucket="aux",
        Key="relative.yaml",
        Body=(
            HEADER + "    path: ds1\n    aux:\n      pkl_source: ./ds2\n"
            "      fs_source: filesystem://./plain\n"
        ).encode(),
    )
    s3.upload(folders / "ds2", "aux", "ds2")

    def texts(path: Any) -> list[str]:
        dataset = get_train_dataset(
            path,
            worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
            batch_size=2,
            shuffle_buffer_size=None,
            max_samples_per_sequence=5,
            task_encoder=PlainEncoder(),
        )
        return [t for _, b in zip(range(3), get_loader(dataset)) for t in b.text]

    for path in (yamls["msc"], yamls["s3"], "s3://aux/relative.yaml"):
        got = texts(path)
        assert len(got) == 6 and all(t.endswith("|hello from a bucket>") for t in got), got
    (tmp_path / "escape.yaml").write_text(
        HEADER + "    path: ds1\n    aux:\n      fs_source: filesystem+nope://x/y\n"
    )
    with pytest.raises(DatasetFormatError, match=r"escape.yaml.*fs_source.*'nope'"):
        texts(tmp_path / "escape.yaml")
