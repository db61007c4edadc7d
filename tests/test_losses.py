"""Losses are errors, not warnings: what is skipped, and what stops the run (docs/safety.md).

A skipped sample is one whose own bytes are bad, and the skips of a worker's whole pass are
bounded (``max_skip_fraction``); a store that stops answering is an infrastructure failure:
retried, then the run stops naming it. Real shards, real worker processes, moto's S3 server
on 127.0.0.1.
"""

from __future__ import annotations

import errno
import io
import logging
import re
import tarfile
from pathlib import Path

import pytest

from energon_lite import (
    TaskEncoder,
    WorkerConfig,
    get_savable_loader,
    get_train_dataset,
    get_val_dataset,
    prepare_dataset,
)
from energon_lite.errors import ConfigError, RemoteStorageError, TooManyFailuresError
from energon_lite.synth.shards import make_image


def _write(root: Path, count: int, per_shard: int, bad: set[int]) -> Path:
    """``count`` image+caption samples; those in ``bad`` carry bytes that are not a JPEG."""
    for shard, start in enumerate(range(0, count, per_shard)):
        path = root / "parts" / f"data-{shard}.tar"
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
            for index in range(start, min(count, start + per_shard)):
                buffer = io.BytesIO()
                make_image(index, (8, 8)).save(buffer, format="JPEG")
                image = b"\xff\xd8 truncated, not a JPEG" if index in bad else buffer.getvalue()
                for name, data in ((f"{index:06d}.jpg", image), (f"{index:06d}.txt", b"cap")):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    prepare_dataset(
        root,
        split_ratio=[("train", 1)],
        sample_type="CaptioningSample",
        field_map={"image": "jpg", "caption": "txt"},
        progress=False,
    )
    return root


def _keys(path: Path | str, workers: int = 1, **options) -> list[str]:
    dataset = get_train_dataset(
        path,
        worker_config=WorkerConfig(0, 1, workers),
        batch_size=10,
        shuffle_buffer_size=20,
        max_samples_per_sequence=10,
        repeat=False,
        **options,
    )
    return [key for batch in get_savable_loader(dataset) for key in batch.__key__]


def test_a_pass_where_most_samples_are_corrupt_stops_with_a_summary(tmp_path, caplog):
    """7 of every 10 images are corrupt: no 100 fail in a row (the buffer mixes good ones
    in), so the per-stage streak alone let the pass end with 150 of 500 delivered."""
    bad = {i for i in range(500) if i % 10 < 7}
    root = _write(tmp_path / "ds", 500, 50, bad)
    with pytest.raises(TooManyFailuresError) as caught:
        _keys(root)
    message = str(caught.value)
    assert "rank 0 worker 0 skipped " in message and "max_skip_fraction=0.01" in message
    assert "First skips: encode_sample at key=" in message and "MediaDecodeError" in message
    named = re.findall(r"key='(\d+)'", message)
    assert len(named) == 5 and {int(key) for key in named} <= bad  # the first few, not 350
    # a few bad samples in a large pass are skipped, each logged with its key
    few = _write(tmp_path / "few", 500, 50, {3, 250})
    with caplog.at_level(logging.WARNING, logger="energon_lite"):
        assert len(_keys(few, workers=0)) == 498  # in this process: caplog sees the log
    assert "000003" in caplog.text and "000250" in caplog.text
    # the bound is the caller's: raised, or not counted at all
    assert len(_keys(root, max_skip_fraction=0.8)) == 150
    assert len(_keys(root, max_skip_fraction=None)) == 150


def test_max_skip_fraction_is_checked() -> None:
    for value in (-0.1, 1.5, "0.1", True):
        with pytest.raises(ConfigError, match="max_skip_fraction="):
            get_val_dataset("/nonexistent", worker_config=WorkerConfig(0, 1, 0),
                            batch_size=1, max_skip_fraction=value)  # fmt: skip


def test_the_s3_server_killed_mid_epoch_stops_the_run_naming_the_store(tmp_path, monkeypatch):
    """Before: the stand-ins of every unreadable range failed like bad samples, fewer than
    ``failure_tolerance`` in a row (here: the last 80; in the issue, the buffer's good ones
    reset the streak), and the pass ended short of 300, no exception."""
    pytest.importorskip("moto")
    pytest.importorskip("s3fs")
    from energon_lite.synth.servers import TEST_CREDENTIALS, FaultProxy, S3Server

    root = _write(tmp_path / "ds", 300, 10, set())
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", TEST_CREDENTIALS["key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", TEST_CREDENTIALS["secret"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("ENERGON_LITE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ENERGON_LITE_REMOTE_ATTEMPTS", "3")  # bounded: ~0.2 s of backoff
    with S3Server() as server, FaultProxy(server.endpoint) as store:
        server.upload(root, "data", "ds")
        monkeypatch.setenv("AWS_ENDPOINT_URL", store.endpoint)
        dataset = get_train_dataset(
            "s3://data/ds",
            worker_config=WorkerConfig(0, 1, 1),
            batch_size=10,
            shuffle_buffer_size=20,
            max_samples_per_sequence=10,
            repeat=False,
        )
        first = [key for batch in get_savable_loader(dataset) for key in batch.__key__]
        assert len(set(first)) == 300  # the indexes are in the local cache now; the shards not
        delivered = []
        with pytest.raises(RemoteStorageError) as caught:
            for batch in get_savable_loader(dataset):
                delivered += batch.__key__
                if len(delivered) == 220:  # fewer than failure_tolerance=100 left to read
                    # the store's process dies mid-epoch: from now on every request has
                    # its connection cut without an answer, as a dead process's are (no
                    # timeout to wait out; the proxy's listening socket stays open: the
                    # forked worker holds a copy of it, so closing it here would not refuse)
                    store.schedule = lambda number, path: "drop"
    assert 220 <= len(delivered) < 300
    message = str(caught.value)
    assert "s3://data/ds/parts/data-" in message and "failed after 3 attempts" in message


class _Spill(TaskEncoder):
    """Writes 40 KB per sample to a folder, as a hook that spills to local disk would."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder

    def encode_sample(self, sample):
        (self.folder / f"{sample.__key__}.bin").write_bytes(b"x" * 40_000)
        return sample


def test_a_full_disk_inside_a_hook_stops_the_run(tmp_path, small_disk, caplog):
    """ENOSPC is the machine's failure, not the sample's: before, each sample after the disk
    filled was skipped as bad, 101 of them, until the streak bound raised
    TooManyFailuresError; now the first ENOSPC stops the run, logged with the key."""
    root = _write(tmp_path / "ds", 120, 20, set())
    spill = _Spill(small_disk)
    with caplog.at_level(logging.ERROR, logger="energon_lite"), pytest.raises(OSError) as caught:
        _keys(root, workers=0, task_encoder=spill, max_skip_fraction=None)
    assert caught.value.errno == errno.ENOSPC
    assert "stopping: encode_sample failed at key=" in caplog.text
    assert "never skipped" in caplog.text
