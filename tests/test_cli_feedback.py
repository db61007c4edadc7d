"""Long commands show their progress and end at 100% (issue 26, item 11).

(The demo's training bar is checked in test_cli.py's demo test; how fast the command starts
is measured by benchmarks/bench_cli_startup.py.)
"""

from __future__ import annotations

import re
from pathlib import Path

from energon_lite.cli import main
from energon_lite.synth.shards import write_captioning_shards


def _renders(err: str, desc: str) -> list[str]:
    """Every state the bar called ``desc`` was drawn in, in order."""
    return [part.strip() for part in re.split(r"[\r\n]", err) if part.startswith(f"{desc}:")]


def test_prepare_progress_reaches_every_shard(tmp_path: Path, capsys) -> None:
    write_captioning_shards(tmp_path / "data", 30, 10, image_size=(8, 8))
    argv = ["prepare", "--non-interactive", "--split-ratio", "1,1,1"]
    argv += ["--sample-type", "CaptioningSample", "--field-map"]
    argv += ['{"image": "jpg", "caption": "txt"}', str(tmp_path / "data")]
    assert main(argv) == 0
    bars = _renders(capsys.readouterr().err, "indexing shards")
    assert bars and "100%" in bars[-1] and "3/3" in bars[-1], bars


def test_bench_shows_live_samples_per_second_and_ends_at_100(
    train_ds: Path, tmp_path: Path, capsys
) -> None:
    argv = ["bench", str(train_ds), "--seconds", "1.5", "--num-workers", "0"]
    assert main([*argv, "--batch-size", "4", "--out", str(tmp_path / "bench")]) == 0
    captured = capsys.readouterr()
    bars = _renders(captured.err, "bench")
    assert len(bars) >= 3, bars  # drawn while it runs, not only at the end
    assert any(re.search(r"\d samples/s, [\d,]+ samples", bar) for bar in bars[:-1]), bars
    assert bars[-1].startswith("bench: 100%") and "1.5/1.5 s" in bars[-1], bars
    assert "samples/s" in captured.out  # and the report as before


def test_an_error_comes_after_the_last_line_of_the_bar_it_interrupted(tmp_path: Path) -> None:
    """In a real process (tqdm closes open bars at exit): the error is the last line."""
    import subprocess
    import sys
    import tarfile

    root = tmp_path / "data"
    write_captioning_shards(root, 30, 10, image_size=(8, 8))
    tarfile.open(root / "parts" / "data-9.tar", "w").close()  # holds no sample: an error
    argv = ["prepare", "--non-interactive", "--split-ratio", "1", "--sample-type",
            "CaptioningSample", "--field-map", '{"image": "jpg", "caption": "txt"}', str(root)]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "energon_lite.cli", *argv],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 1
    assert "indexing shards" in done.stderr  # the bar was drawn
    last = [part for part in re.split(r"[\r\n]", done.stderr) if part.strip()][-1]
    assert last.startswith("energon-lite prepare: error:") and "holds no samples" in last, last
