"""`prepare` under kills, races and odd inputs: never a folder that looks prepared with an
index missing, never a crash between two prepares, our error types for bad files (issue 15)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

import energon_lite
from energon_lite import prepare_dataset
from energon_lite.errors import DatasetFormatError
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.synth.shards import write_captioning_shards

FIELD_MAP = {"image": "jpg", "caption": "txt"}
PREPARE = [
    sys.executable, "-m", "energon_lite.cli", "prepare", "--non-interactive",
    "--split-ratio", "1", "--sample-type", "CaptioningSample",
    "--field-map", json.dumps(FIELD_MAP),
]  # fmt: skip


def _env() -> dict[str, str]:
    root = str(Path(energon_lite.__file__).resolve().parents[1])  # the code under test
    return {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _check_valid(root: Path, num_samples: int) -> None:
    ds = PreparedDataset(root, "train")
    assert len(ds) == num_samples
    keys = [ds.read(*ds.locate(p))[0] for p in range(len(ds))]
    assert sorted(keys) == [f"{i:06d}" for i in range(num_samples)]


def test_killed_prepare_leaves_no_metadata_and_a_rerun_succeeds(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    write_captioning_shards(root, 600, 2, image_size=(8, 8))  # 300 shards
    proc = subprocess.Popen(
        [*PREPARE, str(root)], env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 120
    while len(list(root.glob("parts/*.tar.idx"))) < 5 and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    written = len(list(root.glob("parts/*.tar.idx")))
    assert 5 <= written < 300, "killed after some indexes, before the last"
    assert not (root / ".nv-meta").exists()
    with pytest.raises(DatasetFormatError, match=r"has no \.nv-meta folder: it is not a prepared"):
        PreparedDataset(root, "train")
    # what a kill inside the metadata write or an index write leaves behind
    (root / f".nv-meta.tmp-{proc.pid}").mkdir()
    (root / f".nv-meta.tmp-{proc.pid}/.info.json").write_text("{}")
    (root / f"parts/data-7.tar.idx.tmp-{proc.pid}").write_bytes(b"\0" * 8)
    (root / "parts/data-8.tar.idx.tmp").write_bytes(b"\0" * 8)  # an older prepare's name
    done = subprocess.run(
        [*PREPARE, str(root)], env=_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    _check_valid(root, 600)
    leftovers = [p.name for p in root.rglob("*") if ".tmp" in p.name or ".old" in p.name]
    assert leftovers == [] and not (root / ".nv-meta.lock").exists()


_AT_THE_SIGNAL = """
import sys, time, pathlib
from energon_lite.cli import main
ready, go = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
ready.touch()
while not go.exists():
    time.sleep(0.002)
sys.exit(main(sys.argv[3:]))
"""


def test_concurrent_prepares_succeed_or_say_locked(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    write_captioning_shards(root, 240, 2, image_size=(8, 8))  # 120 shards
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _AT_THE_SIGNAL,
                str(tmp_path / f"ready-{i}"),
                str(go),
                *PREPARE[3:],
                "--force-overwrite",
                str(root),
            ],
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    deadline = time.monotonic() + 240
    while len(list(tmp_path.glob("ready-*"))) < len(procs) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()  # all start preparing at once
    results = [(*p.communicate(timeout=300), p.returncode) for p in procs]
    outcomes = []
    for _, err, rc in results:
        assert "Traceback" not in err, err
        if rc == 0:
            outcomes.append("ok")
        else:
            assert rc == 1 and "is locked by another prepare" in err, (rc, err)
            outcomes.append("locked")
    assert "ok" in outcomes
    _check_valid(root, 240)
    assert not list(root.rglob("*.tmp*")) and not (root / ".nv-meta.lock").exists()


def _tar(path: Path, members: list[tuple[str, bytes]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_duplicate_keys_across_shards_name_both_shards(tmp_path: Path) -> None:
    write_captioning_shards(tmp_path, 40, 20, image_size=(8, 8))
    copy = tmp_path / "parts/data-9.tar"
    copy.write_bytes((tmp_path / "parts/data-1.tar").read_bytes())
    with pytest.raises(
        DatasetFormatError,
        match=r"sample key '0000\d\d' is in two shards, parts/data-1\.tar and parts/data-9\.tar "
        r"\(20 repeated key\(s\) in all\)",
    ):
        prepare_dataset(tmp_path, split_ratio=[("train", 1)], sample_type="CaptioningSample",
                        field_map=FIELD_MAP, progress=False)  # fmt: skip
    assert not (tmp_path / ".nv-meta").exists() and not list(tmp_path.rglob("*.idx"))
    report = prepare_dataset(
        tmp_path,
        split_ratio=[("train", 1)],
        sample_type="CaptioningSample",
        field_map=FIELD_MAP,
        allow_duplicate_keys=True,
        progress=False,
    )
    assert report.num_samples == 60


def test_non_utf8_long_name_is_a_format_error(tmp_path: Path) -> None:
    long_name = b"k" * 120 + b"\xff\xfe.txt"
    with tarfile.open(tmp_path / "a.tar", "w", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo(long_name.decode("utf-8", "surrogateescape"))
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(DatasetFormatError, match=r"a\.tar: .*not UTF-8"):
        prepare_dataset(tmp_path, split_ratio=[("train", 1)], sample_type="TextSample",
                        field_map={"text": "txt"}, progress=False)  # fmt: skip
    _tar(tmp_path / "a.tar", [(b"\xffbad.txt".decode("utf-8", "surrogateescape"), b"hi")])
    with pytest.raises(DatasetFormatError, match=r"a\.tar: member name .* is not UTF-8"):
        prepare_dataset(tmp_path, split_ratio=[("train", 1)], sample_type="TextSample",
                        field_map={"text": "txt"}, progress=False)  # fmt: skip


def test_dangling_symlink_shard_is_named_at_prepare(tmp_path: Path) -> None:
    write_captioning_shards(tmp_path, 20, 10, image_size=(8, 8))
    (tmp_path / "parts/link.tar").symlink_to(tmp_path / "parts/gone.tar")
    with pytest.raises(DatasetFormatError, match=r"parts/link\.tar: shard is missing"):
        prepare_dataset(tmp_path, split_ratio=[("train", 1)], sample_type="CaptioningSample",
                        field_map=FIELD_MAP, progress=False)  # fmt: skip
    assert not (tmp_path / ".nv-meta").exists() and not list(tmp_path.rglob("*.idx"))
