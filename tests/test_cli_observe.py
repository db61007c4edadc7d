"""``energon-lite bench`` and ``energon-lite preview --grid``: what they print and the PNGs."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import make_dataset
from PIL import Image

from energon_lite import prepare_dataset
from energon_lite.cli import main
from energon_lite.cli.grid import CAPTION_HEIGHT
from energon_lite.synth.shards import write_captioning_shards


@pytest.fixture(scope="module")
def captions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("observe") / "captions"
    return make_dataset(root, 120, 20, image_size=(24, 24), with_json=False)


def _png(path: Path) -> Image.Image:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        image.verify()
    image = Image.open(path)
    image.load()
    return image


def test_bench_reports_and_plots(
    captions: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    (tmp_path / "my_task.py").write_text(
        textwrap.dedent(
            """
            from energon_lite import TaskEncoder

            class Flip(TaskEncoder):
                def encode_sample(self, sample):
                    sample.image = sample.image.flip(-1)
                    return sample
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "report"
    args = ["bench", str(captions), "--task-encoder", "my_task:Flip", "--num-workers", "0"]
    assert main([*args, "--seconds", "0.5", "--batch-size", "8", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "samples/s" in text and "bottleneck: " in text and "hint: " in text
    for stage in ("read (Reader)", "shuffle (ShuffleBuffer)", "decode (Encode)", "encode_sample"):
        assert stage in text
    stats = json.loads((out / "stats.json").read_text())
    assert stats["samples"] > 0 and stats["samples"] == 8 * stats["batches"]
    assert stats["bottleneck"] in text and stats["hint"].endswith("use num_workers >= 2")
    assert stats["throughput"] and all(rate >= 0 for _, rate in stats["throughput"])
    throughput = _png(out / "throughput.png")
    assert throughput.size == (800, 400)
    stages = _png(out / "stages.png")  # one bar per stage + "other"
    assert stages.width == 800 and stages.height == 100 * (0.5 * 6 + 1.5)
    pixels = np.asarray(stages.convert("RGB"))
    assert (np.abs(pixels.astype(int) - (255, 127, 14)).sum(axis=2) < 30).sum() > 500  # bars

    # without matplotlib the report is the same and says how to get the plots
    for module in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    bare = tmp_path / "bare"
    assert main([*args[:2], "--num-workers", "0", "--seconds", "0.2", "--out", str(bare)]) == 0
    assert "energon-lite[plot]" in capsys.readouterr().out
    assert (bare / "stats.json").is_file() and not (bare / "stages.png").exists()


def test_bench_refuses_what_is_not_a_task_encoder(captions: Path, capsys) -> None:
    assert main(["bench", str(captions), "--task-encoder", "json:JSONDecoder"]) == 1
    assert "not a TaskEncoder subclass" in capsys.readouterr().err
    assert main(["bench", str(captions), "--task-encoder", "no_such_module_here:X"]) == 1
    assert "cannot import 'no_such_module_here'" in capsys.readouterr().err


def test_preview_grid_of_images(captions: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "grid.png"
    args = ["--columns", "4", "--cell", "64"]
    assert main(["preview", str(captions), "--grid", str(out), "-n", "6", *args]) == 0
    assert "6 samples" in capsys.readouterr().out
    grid = _png(out)
    assert grid.size == (4 * 64, 2 * (64 + CAPTION_HEIGHT))
    pixels = np.asarray(grid.convert("RGB")).astype(int)
    row_two = 64 + CAPTION_HEIGHT
    for number in range(6):  # a picture in each of the 6 cells, not the grey background
        x, y = (number % 4) * 64 + 32, (number // 4) * row_two + 32
        assert tuple(pixels[y, x]) != (64, 64, 64)
    assert (pixels[row_two : row_two + 64, 2 * 64 :] == 255).all()  # two empty cells: white
    assert (pixels[64 : 64 + CAPTION_HEIGHT, :64] < 100).any()  # caption text under cell 0


def test_preview_grid_of_videos_shows_first_frames(tmp_path: Path, capsys) -> None:
    from energon_lite.flavors.video_text.prepare import prepare_video_text
    from energon_lite.synth.av import read_frame_index
    from energon_lite.synth.video_text import make_media, write_table

    csv_path = write_table(tmp_path / "videos.csv", make_media(tmp_path), 4)
    prepare_video_text(csv_path, progress=False)
    out = tmp_path / "videos.png"
    assert main(["preview", str(csv_path), "--grid", str(out), "--columns", "2"]) == 0
    assert "4 samples" in capsys.readouterr().out
    grid = np.asarray(_png(out).convert("RGB"))
    assert grid.shape == (2 * (160 + CAPTION_HEIGHT), 2 * 160, 3)
    # the first frame of wide.mp4 (64x48, frame 0 draws index 0), fitted at the cell's middle
    scale = 156 / 64
    height, width = round(48 * scale), round(64 * scale)
    top, left = (160 - height) // 2, (160 - width) // 2
    assert read_frame_index(grid[top : top + height, left : left + width]) == 0
    assert tuple(grid[2, 80]) == (64, 64, 64)  # the letterbox around it is the background


def test_bench_of_one_shard_with_two_workers_shows_both_delivering(tmp_path: Path, capsys) -> None:
    """100 samples in one shard, 2 workers, bench's max_samples_per_sequence of 100: each
    worker owns half of the samples (before, worker 1 got no slice and sat idle)."""
    root = tmp_path / "one"
    write_captioning_shards(root, 100, 100, image_size=(8, 8))
    prepare_dataset(
        root,
        split_ratio=[("train", 1)],
        sample_type="CaptioningSample",
        field_map={"image": "jpg", "caption": "txt"},
        progress=False,
    )
    out = tmp_path / "bench"
    argv = ["bench", str(root), "--num-workers", "2", "--seconds", "2", "--batch-size", "10"]
    assert main([*argv, "--out", str(out)]) == 0
    workers = json.loads((out / "stats.json").read_text())["workers"]
    assert [w["worker"] for w in workers] == [0, 1]
    assert all(w["batches"] > 0 for w in workers), workers
    assert "worker busy: #0" in capsys.readouterr().out


def test_preview_grid_of_a_metadataset_shows_each_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_dataset(tmp_path / "one", 20, 10)
    make_dataset(tmp_path / "two", 20, 10)
    meta = tmp_path / "blend.yaml"
    meta.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        "    blend:\n      - weight: 1\n        path: one\n      - weight: 1\n        path: two\n"
    )
    out = tmp_path / "blend.png"
    assert main(["preview", str(meta), "--grid", str(out), "-n", "4", "--cell", "64"]) == 0
    assert "wrote" in capsys.readouterr().out and _png(out).size == (4 * 64, 64 + CAPTION_HEIGHT)


def test_preview_grid_of_videos_without_pyav_fails_naming_the_extra(tmp_path: Path) -> None:
    """Without PyAV every cell would be grey: the command fails with the install hint."""
    import io
    import subprocess
    import tarfile

    from energon_lite.synth.av import make_video

    root = tmp_path / "videos"
    (root / "parts").mkdir(parents=True)
    with tarfile.open(root / "parts" / "data-0.tar", "w") as tar:
        for i in range(2):
            video = io.BytesIO()
            make_video(video, num_frames=4)
            for name, data in ((f"{i:04d}.mp4", video.getvalue()), (f"{i:04d}.txt", b"a clip")):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    prepare_dataset(root, split_ratio=[("train", 1)], sample_type="CaptioningSample",
                    field_map={"image": "mp4", "caption": "txt"}, progress=False)  # fmt: skip
    out = tmp_path / "videos.png"
    code = (
        "import sys; sys.modules['av'] = None\n"
        "from energon_lite.cli import main\n"
        f"sys.exit(main(['preview', {str(root)!r}, '--grid', {str(out)!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "pip install 'energon-lite[av]'" in done.stderr and not out.exists()


def test_bench_live_count_ends_at_the_summarys_count(
    captions: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import re

    from energon_lite.cli.bench import run_bench

    report = run_bench(captions, num_workers=1, seconds=1.5, batch_size=4, progress=True,
                       print_fn=lambda line: None)  # fmt: skip
    shown = re.findall(r"samples/s, ([\d,]+) samples", capsys.readouterr().err)
    assert shown and int(shown[-1].replace(",", "")) == report["samples"], (
        shown,
        report["samples"],
    )
