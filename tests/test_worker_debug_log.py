"""Energon's worker debug sample logs (``WorkerConfig(worker_debug_path=...,
worker_log_level=...)``): one JSON-lines file per process, the main process's listing each
batch it hands out with its sample keys, each loader worker's each batch it made."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from energon_lite import WorkerConfig, get_savable_loader, get_val_dataset
from energon_lite.errors import ConfigError


def _cli(*args: str) -> str:
    import contextlib
    import io

    from energon_lite.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(args)) == 0
    return out.getvalue()


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_process_logs_its_batches_with_their_keys(train_ds: Path, tmp_path: Path) -> None:
    """As Energon's test_debug_dataset: 2 workers, 2 passes of a val loader; files 0 (the
    main process), 1 and 2 (the workers); the main log's ``SavableDataLoader.yield`` events
    give each pass's batches' keys in order (before: a ConfigError refused the options)."""
    wc = WorkerConfig(
        rank=0,
        world_size=1,
        num_workers=2,
        worker_log_level=3,
        worker_debug_path=str(tmp_path / "worker_debug" / "{worker_id}.jsonl"),
    )
    loader = get_savable_loader(
        get_val_dataset(train_ds, split_part="train", batch_size=12, worker_config=wc)
    )
    assert len(loader) == 10
    passes = [[batch.__key__ for batch in loader] for _ in range(2)]
    folder = tmp_path / "worker_debug"
    assert sorted(p.name for p in folder.iterdir()) == ["0.jsonl", "1.jsonl", "2.jsonl"]

    main = _events(folder / "0.jsonl")
    assert main[0]["t"] == "SavableLoader.__init__" and main[0]["id"] == loader.id
    yields = [e for e in main if e["t"] == "SavableDataLoader.yield"]
    iter_ids = sorted({e["iter_id"] for e in yields})
    assert [[e["keys"] for e in yields if e["iter_id"] == i] for i in iter_ids] == passes
    assert [e["idx"] for e in yields] == list(range(10)) * 2
    assert [e["global_idx"] for e in yields] == list(range(20))
    assert [e["t"] for e in main].count("SavableDataLoader.iter") == 2
    assert [e["t"] for e in main].count("SavableDataLoader.StopIteration") == 2

    made: list[list[str]] = []
    for worker in (1, 2):  # each worker process appends; a pass starts new ones
        events = [e for e in _events(folder / f"{worker}.jsonl") if e["t"] == "yield_batch"]
        assert events and {e["w"] for e in events} == {worker - 1}
        assert all(e["m"] == "val" and e["r"] == 0 for e in events)
        made += [e["keys"] for e in events]
    assert sorted(made) == sorted(keys for batches in passes for keys in batches)

    # Energon's analysis of the logs: every key, every step, and a heatmap of them
    out = _cli("analyze-debug", str(folder), "--include-modality", "train,val",
               "--heatmap-path", str(tmp_path / "heatmap.png"))  # fmt: skip
    assert "Analyzing 3 logs" in out and "Found 120 unique sample keys, 20 steps" in out
    from PIL import Image

    with Image.open(tmp_path / "heatmap.png") as image:
        assert image.size == (20, 120)  # a column per step, a row per sample key
    with Image.open(tmp_path / "heatmap.axes.png") as view:  # for reading: scaled, with axes
        pixels = np.asarray(view.convert("RGB"))
    assert pixels.shape[0] >= 400 and pixels.shape[1] >= 400, pixels.shape
    assert (pixels == 255).all(axis=2).mean() > 0.5  # mostly white, not black
    assert (pixels[-40:, :] < 100).any() and (pixels[:, :40] < 100).any()  # axis labels


def test_without_a_path_the_events_go_to_stdout(
    train_ds: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0, worker_log_level=1)
    loader = get_savable_loader(
        get_val_dataset(train_ds, split_part="train", batch_size=60, worker_config=wc)
    )
    keys = [batch.__key__ for batch in loader]
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["keys"] for e in events if e["t"] == "SavableDataLoader.yield"] == keys
    assert [e["keys"] for e in events if e["t"] == "yield_batch"] == keys  # made in-process


def test_level_0_logs_nothing_and_a_path_needs_the_worker_id(
    train_ds: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wc = WorkerConfig(
        rank=0, world_size=1, num_workers=0, worker_debug_path=str(tmp_path / "{worker_id}")
    )
    list(
        get_savable_loader(
            get_val_dataset(train_ds, split_part="train", batch_size=60, worker_config=wc)
        )
    )
    assert list(tmp_path.iterdir()) == [] and capsys.readouterr().out == ""
    with pytest.raises(
        ConfigError, match=r"worker_debug_path='/x/log.jsonl' needs '\{worker_id\}'"
    ):
        WorkerConfig(rank=0, world_size=1, num_workers=0, worker_debug_path="/x/log.jsonl")


def test_analyze_debug_skips_and_counts_lines_it_cannot_read(
    train_ds: Path, tmp_path: Path
) -> None:
    """A line nested 100,000 deep, a 100,000-digit number, bytes that are not UTF-8 and plain
    garbage, each marked as a yield event, used to abort the whole analysis (RecursionError,
    ValueError, UnicodeDecodeError): each is skipped, named (the first 3) and counted."""
    folder = tmp_path / "logs"
    wc = WorkerConfig(
        rank=0,
        world_size=1,
        num_workers=0,
        worker_log_level=1,
        worker_debug_path=str(folder / "{worker_id}.jsonl"),
    )
    list(
        get_savable_loader(
            get_val_dataset(train_ds, split_part="train", batch_size=12, worker_config=wc)
        )
    )
    mark = b'{"t": "SavableDataLoader.yield", '
    bad = [
        mark + b'"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
        mark + b'"id": ' + b"7" * 100_000 + b"}\n",
        mark + b'"keys": ["\xff\xfe"]}\n',
        mark + b"oops\n",
    ]
    with open(folder / "0.jsonl", "ab") as file:
        file.writelines(bad)
    out = _cli("analyze-debug", str(folder), "--include-modality", "val",
               "--heatmap-path", str(tmp_path / "heatmap.png"))  # fmt: skip
    assert "Found 120 unique sample keys, 10 steps" in out, out
    assert "nested too deep; skipped" in out and "not readable JSON" in out, out
    assert "not UTF-8 (byte" in out and "0.jsonl: 4 unreadable line(s) skipped" in out, out
