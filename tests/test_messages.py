"""Messages a new user meets, each saying what is wrong and where to fix it (issue 26, item 10).

(The rate-limited "skipping:" lines of a hook that fails every sample are tested in
test_encode.py.)
"""

from __future__ import annotations

import itertools
import os
import tarfile
from pathlib import Path

import pytest

from energon_lite import WorkerConfig, get_loader, get_savable_loader, get_train_dataset
from energon_lite.cli import main
from energon_lite.errors import ConfigError, StateError


def _loader(path: Path, num_workers: int = 0):
    wc = WorkerConfig(rank=0, world_size=1, num_workers=num_workers)
    dataset = get_train_dataset(
        path, worker_config=wc, batch_size=4, shuffle_buffer_size=None,
        max_samples_per_sequence=None,
    )  # fmt: skip
    return get_savable_loader(dataset)


def test_worker_config_names_the_argument_not_the_attribute() -> None:
    with pytest.raises(ConfigError) as error:
        WorkerConfig(rank=0, world_size=1, num_workers=-1)
    assert str(error.value) == "WorkerConfig: num_workers=-1 must be >= 0"
    with pytest.raises(ConfigError) as error:
        WorkerConfig(rank=2, world_size=2, num_workers=0)
    assert "got rank=2, world_size=2" in str(error.value) and "self." not in str(error.value)


def test_help_is_plain_text_and_names_every_command(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "`" not in out
    for command in ("prepare", "prepare-media", "info", "preview", "lint", "bench", "demo"):
        assert f"\n    {command}" in out, command
    assert "energon-lite COMMAND --help" in " ".join(out.split())


def test_a_corrupt_image_names_the_sample_part_and_shard(
    train_ds: Path, tmp_path: Path, dataset_factory, capsys, caplog
) -> None:
    broken = dataset_factory(tmp_path / "broken", 20, 10)
    shard = broken / "parts/data-1.tar"
    with tarfile.open(shard) as tar:
        member = tar.getmember("000013.jpg")
    data = bytearray(shard.read_bytes())
    data[member.offset_data : member.offset_data + 64] = b"\0" * 64
    before = shard.stat()
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    expected = (
        "sample '000013' part 'jpg' of parts/data-1.tar: cannot decode: UnidentifiedImageError: "
        "not an image Pillow can read ("
    )
    assert main(["preview", str(broken), "-n", "20"]) == 1
    err = capsys.readouterr().err
    assert expected in err and "BytesIO" not in err
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    dataset = get_train_dataset(
        broken, worker_config=wc, batch_size=4, shuffle_buffer_size=None,
        max_samples_per_sequence=None, repeat=False,
    )  # fmt: skip
    assert sum(len(batch.__key__) for batch in dataset) == 19  # the broken one is skipped
    assert expected in caplog.text and "BytesIO" not in caplog.text


def test_bench_names_a_missing_task_encoder_class(
    train_ds: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    (tmp_path / "my_encoders.py").write_text(
        "from energon_lite import TaskEncoder\n\nclass MyEncoder(TaskEncoder):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["bench", str(train_ds), "--task-encoder", "my_encoders:Missing"]) == 1
    err = capsys.readouterr().err
    assert "--task-encoder 'my_encoders:Missing': my_encoders has no 'Missing'" in err
    assert "its TaskEncoder classes: MyEncoder" in err and "subclass" not in err


def test_bench_batch_size_zero_says_what_the_command_accepts(train_ds: Path, capsys) -> None:
    assert main(["bench", str(train_ds), "--batch-size", "0"]) == 1
    err = capsys.readouterr().err
    assert err.strip().endswith("error: --batch-size 0: must be >= 1") and "None" not in err


def test_a_restore_into_another_dataset_names_both_paths(train_ds: Path, split_ds: Path) -> None:
    saved = _loader(train_ds)
    next(iter(saved))
    state = saved.save_state_rank()
    with pytest.raises(StateError) as error:
        _loader(split_ds).restore_state_rank(state)
    message = str(error.value)
    assert f"The state was saved reading {train_ds} (split train)" in message
    assert f"this loader reads {split_ds} (split train), whose content differs" in message


def test_a_num_workers_mismatch_points_to_restore_state_global(train_ds: Path) -> None:
    saved = _loader(train_ds)
    next(iter(saved))
    state = saved.save_state_rank()
    other = _loader(train_ds, num_workers=1)
    with pytest.raises(StateError) as error:
        other.restore_state_rank(state)
    assert "num_workers: state has 0, this loader has 1" in str(error.value)
    assert "loader.restore_state_global(states)" in str(error.value)
    other.restore_state_global([state])  # which does restore it
    assert len(next(iter(other)).__key__) == 4
    other.close()


def test_loader_arguments_that_belong_to_the_dataset_say_where_they_go(train_ds: Path) -> None:
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    dataset = get_train_dataset(
        train_ds, worker_config=wc, batch_size=4, shuffle_buffer_size=None,
        max_samples_per_sequence=None,
    )  # fmt: skip
    with pytest.raises(ConfigError) as error:
        get_savable_loader(dataset, num_workers=2)
    assert str(error.value).startswith(
        "get_savable_loader(num_workers=2): the loader takes rank, world_size and num_workers "
        "from the dataset's WorkerConfig"
    )
    assert "(this one has rank=0, world_size=1, num_workers=0)" in str(error.value)
    with pytest.raises(ConfigError, match=r"get_loader\(batch_size=\.\.\.\): an argument of"):
        get_loader(dataset, batch_size=8)
    assert list(itertools.islice(get_savable_loader(dataset), 1))  # the dataset is fine
