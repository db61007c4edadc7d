"""``energon-lite bench --report out.html``: one page that needs nothing else, with every plot
inline, and the PNG beside it; rendered by a real headless Chromium where one is installed."""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import installed_or_skip, make_dataset, write_two_leaves
from PIL import Image

from energon_lite.cli import main
from energon_lite.cli.bench import run_bench
from energon_lite.cli.bench_report import PLOTS

installed_or_skip("matplotlib", reason="pip install 'energon-lite[plot]'")

CHROMIUM = "/usr/bin/chromium"
ORANGE, BLUE = (255, 127, 14), (31, 119, 180)  # the stage bars, the throughput line


def _near(pixels: np.ndarray, color: tuple[int, int, int]) -> int:
    return int((np.abs(pixels.astype(int) - color).sum(axis=2) < 30).sum())


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("report")
    data = make_dataset(folder / "captions", 160, 20, image_size=(24, 24), with_json=False)
    out = folder / "out" / "report.html"
    args = ["bench", str(data), "--num-workers", "2", "--seconds", "1.5", "--batch-size", "8"]
    assert main([*args, "--out", str(folder / "bench"), "--report", str(out)]) == 0
    return out


def test_the_page_needs_nothing_else(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert "execution summary:" in text and "bottleneck: data" in text
    sources = re.findall(r'src="([^"]*)"', text)
    assert len(sources) == len(PLOTS) == 5
    assert not re.search(r"(href|src)=\"(?!data:)", text) and "<script" not in text
    for source in sources:
        assert source.startswith("data:image/png;base64,")
        with Image.open(io.BytesIO(base64.b64decode(source.split(",", 1)[1]))) as image:
            assert image.format == "PNG" and image.width == 800
    titles = re.findall(r"<h2>([^<]*)</h2>", text)
    assert titles == [title for title, _, _ in PLOTS]
    with Image.open(page.with_suffix(".png")) as picture:  # every plot in one, for terminals
        pixels = np.asarray(picture.convert("RGB"))
    assert pixels.shape == (1300, 1600, 3)
    assert _near(pixels, ORANGE) > 2000 and _near(pixels, BLUE) > 200


def test_the_mix_against_its_schedule(tmp_path: Path) -> None:
    paths = write_two_leaves(tmp_path / "leaves")
    out = tmp_path / "mix.html"
    report = run_bench(paths["weighted"], num_workers=0, seconds=1.0, batch_size=4,
                       print_fn=lambda line: None, report_path=out)  # fmt: skip
    assert len(report["mix_timeline"]) >= 2 and report["windows"]
    sources = re.findall(r'src="data:image/png;base64,([^"]*)"', out.read_text(encoding="utf-8"))
    mix = dict(zip([title for title, _, _ in PLOTS], sources))["Mix against the schedule"]
    with Image.open(io.BytesIO(base64.b64decode(mix))) as image:
        pixels = np.asarray(image.convert("RGB"))
    assert _near(pixels, BLUE) > 100 and _near(pixels, ORANGE) > 100  # two sources drawn


def test_chromium_renders_the_plots(page: Path, tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is None:
        pytest.skip(
            f"{CHROMIUM} is not installed (apt-get install --no-install-recommends chromium)"
        )
    shot = tmp_path / "shot.png"
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
         "--window-size=1000,2800", page.as_uri()],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    with Image.open(shot) as image:
        pixels = np.asarray(image.convert("RGB"))
    assert pixels.shape[:2] == (2800, 1000)
    # the stage bars and the throughput line, drawn by the browser from the inline images
    assert _near(pixels, ORANGE) > 2000 and _near(pixels, BLUE) > 200
    assert (pixels[:200] < 100).all(axis=2).sum() > 500  # the heading and the printed report
