"""The energon-lite command: demo, preview, lint, checkpoint info, prepare of robot episodes."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset
from energon_lite.cli import main
from energon_lite.state.codec import encode_state
from energon_lite.testing import take


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "energon_lite.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_demo_resumes_identically(tmp_path: Path) -> None:
    done = _run("demo", "--dir", str(tmp_path / "demo"), "--samples", "400", "--steps", "20")
    assert done.returncode == 0, done.stderr
    assert "5. the 10 batches after the checkpoint are identical (keys and pixels)" in done.stdout
    assert "samples/s" in done.stdout and "first batch" in done.stdout
    assert "train:" in done.stderr  # the progress bar, which ends at 100%
    bars = [line for line in done.stderr.replace("\r", "\n").splitlines() if "train:" in line]
    assert bars[-1].startswith("train: 100%") and "20/20" in bars[-1], bars[-1]


def test_preview_lint_and_info(train_ds: Path, tmp_path: Path, dataset_factory, capsys) -> None:
    assert main(["preview", str(train_ds), "-n", "2"]) == 0
    out = capsys.readouterr().out
    assert (
        "parts/data-0.tar #0 000000" in out
        and "    image (torch.Tensor | typing.Any): Tensor(3, 16, 16) torch.float32" in out
    )
    # Energon's preview lists the key and each field as `name (declared type): value`
    assert "    __key__ (<class 'str'>): '000000'" in out and "__restore_key__" not in out
    broken = dataset_factory(tmp_path / "broken", 20, 10)
    shard = broken / "parts/data-1.tar"
    with tarfile.open(shard) as tar:
        member = tar.getmember("000013.jpg")
    data = bytearray(shard.read_bytes())
    data[member.offset_data : member.offset_data + 64] = b"\0" * 64  # garbage where the JPEG starts
    before = shard.stat()
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))  # bit rot: same size and mtime
    assert main(["lint", str(broken), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert (
        "train: parts/data-1.tar #3 000013: MediaDecodeError: sample '000013' part 'jpg': "
        "cannot decode: UnidentifiedImageError: not an image Pillow can read"
        in out
        and "2 problem(s)" in out
    )
    # and the whole shard against prepare's CRC-32: the rot is found even where it decodes
    assert f"train: {shard}: shard changed since prepare: the CRC-32 of its" in out


def test_checkpoint_info(train_ds: Path, tmp_path: Path, capsys) -> None:
    wc = WorkerConfig(rank=0, world_size=1, num_workers=2)
    loader = get_savable_loader(
        get_train_dataset(
            train_ds,
            worker_config=wc,
            batch_size=4,
            shuffle_buffer_size=10,
            max_samples_per_sequence=10,
        )
    )
    take(loader, 3)
    state = loader.save_state_rank()
    (tmp_path / "state.msgpack").write_bytes(encode_state(state))
    torch.save([state, state], tmp_path / "global.pt")
    assert main(["checkpoint", "info", str(tmp_path / "state.msgpack")]) == 0
    out = capsys.readouterr().out
    assert (
        "next worker 1" in out
        and "batch_size: 4" in out
        and "ShuffleBuffer: keys=" in out
        and "Reader: epoch=0" in out
    )
    # the datasets by name (not only digests), and the step
    assert f"    '{train_ds} (split train)' (content 'train:" in out
    assert "  step: 3 batches delivered in pass 0" in out
    assert main(["checkpoint", "info", str(tmp_path / "global.pt")]) == 0
    assert "rank 1:" in capsys.readouterr().out


def test_prepare_robot_episodes(tmp_path: Path) -> None:
    from energon_lite.synth.episodes import write_dataset

    folder = write_dataset(tmp_path / "episodes", [5, 7], cameras=("top",))
    done = _run("prepare", str(folder))
    assert done.returncode == 0, done.stderr
    assert "Indexed robot episodes" in done.stdout and "scanning episodes" in done.stderr
    assert (folder / ".nv-meta/episodes.npz").is_file()


def test_every_error_is_one_line_with_exit_status_1(train_ds: Path, tmp_path: Path, capsys) -> None:
    def err_of(*args: str) -> str:
        assert main(list(args)) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"energon-lite {args[0]}: error: ") and "Traceback" not in err
        assert err.count("\n") == 1, err  # one line
        return err

    assert "does not exist" in err_of("info", str(tmp_path / "missing"))
    assert "nope.pt: no such file" in err_of("checkpoint", "info", str(tmp_path / "nope.pt"))
    (tmp_path / "garbage.bin").write_bytes(b"\x93garbage")
    assert "garbage.bin: not a loader state" in err_of(
        "checkpoint", "info", str(tmp_path / "garbage.bin")
    )
    assert "--split-ratio 'a,b'" in err_of("prepare", str(tmp_path), "--split-ratio", "a,b")
    assert "not a prepared dataset (yet); run `energon-lite prepare`" in err_of(
        "preview", str(tmp_path)
    )
    for command in ("lint", "info"):  # lint reads split.yaml first: the same hint
        assert "not a prepared dataset (yet); run `energon-lite prepare`" in err_of(
            command, str(tmp_path)
        )
    with pytest.raises(SystemExit) as exit_info:  # a usage mistake: argparse's message, status 1
        main(["preview", str(train_ds), "-n", "many"])
    assert exit_info.value.code == 1
    assert "energon-lite preview: error: argument -n/--num" in capsys.readouterr().err
    version = _run("--version")  # a real process: the exit status the shell sees
    assert version.returncode == 0 and version.stdout.startswith("energon-lite 0.")
    lint = _run("lint", str(tmp_path))
    assert lint.returncode == 1 and lint.stderr.startswith("energon-lite lint: error: ")


def test_every_argument_has_help() -> None:
    from energon_lite.cli.main import build_parser

    def walk(parser: argparse.ArgumentParser, where: str) -> list[str]:
        missing = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    missing += walk(child, f"{where} {name}")
            elif not action.help:
                missing.append(f"{where} {action.dest}")
        return missing

    assert walk(build_parser(), "energon-lite") == []


class _CreatesFile:
    """Unpickling this object opens (creates) a file: stands for any code a pickle can run."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def test_checkpoint_info_never_unpickles(tmp_path: Path, capsys) -> None:
    import pickle

    marker = tmp_path / "pwned"
    payload = {"type": "SavableLoader", "config": {"x": _CreatesFile(marker)}}
    (tmp_path / "state.pkl").write_bytes(pickle.dumps(payload))
    torch.save(payload, tmp_path / "state.pt")
    for name in ("state.pkl", "state.pt"):
        code = main(["checkpoint", "info", str(tmp_path / name)])
        err = capsys.readouterr().err
        assert code != 0 and not marker.exists(), name
        assert str(tmp_path / name) in err and "Traceback" not in err
    main(["checkpoint", "info", str(tmp_path / "state.pkl")])
    assert "is a pickle file; energon-lite never unpickles" in capsys.readouterr().err
    assert main(["checkpoint", "info", str(tmp_path / "nope.pt")]) != 0
    assert "nope.pt: no such file" in capsys.readouterr().err
    # plain-data states still load from JSON (and msgpack/torch.save: test_checkpoint_info)
    (tmp_path / "state.json").write_text('{"type": "SavableLoader", "version": 1, "config": {}}')
    assert main(["checkpoint", "info", str(tmp_path / "state.json")]) == 0
    assert "energon_lite loader state v1" in capsys.readouterr().out
    assert not marker.exists()


def test_checkpoint_info_of_odd_plain_data(tmp_path: Path, capsys) -> None:
    """Crafted but plain-data files: a summary or our error, never a traceback."""
    import json

    cases = {
        "deep.json": "[" * 5000 + "]" * 5000,
        "workers.json": json.dumps({"type": "SavableLoader", "config": {}, "workers": 7}),
        "nodes.json": json.dumps(
            {"type": "SavableLoader", "config": {}, "workers": [{"sources": [1, {}]}, [[[]]]]}
        ),
        "ranks.json": json.dumps([[[[{"type": "SavableLoader"}]]]]),
        "garbage.bin": "\x00\x01not a state",
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        code = main(["checkpoint", "info", str(tmp_path / name)])
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err, name
        assert (code == 0 and captured.out) or str(tmp_path / name) in captured.err, name


def _bounded_cli(*args: str) -> subprocess.CompletedProcess:
    """The CLI in a real process with 3 GiB of address space and 60 s: a read without a
    bound fails on either instead of filling the machine or hanging the suite."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    return subprocess.run(
        [sys.executable, "-m", "energon_lite.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limit,
    )


def test_checkpoint_info_refuses_endless_and_huge_files(tmp_path: Path) -> None:
    fifo = tmp_path / "state.fifo"
    os.mkfifo(fifo)  # nobody ever writes: reading it would block forever
    zero = tmp_path / "zero.msgpack"
    zero.symlink_to("/dev/zero")  # never ends
    huge = tmp_path / "huge.msgpack"
    with open(huge, "wb") as file:  # sparse: 1 GiB + 1 on paper, nothing on disk
        file.truncate((1 << 30) + 1)
    for path, says in (
        (fifo, "is a FIFO (named pipe), not a state file"),
        (zero, "is a character device (a link to /dev/zero), not a state file"),
        (huge, "1,073,741,825 bytes, more than the 1,073,741,824 a state file may have"),
    ):
        done = _bounded_cli("checkpoint", "info", str(path))
        assert done.returncode == 1, (path, done.stderr[-2000:])
        assert f"{path}: {says}" in done.stderr and "Traceback" not in done.stderr
