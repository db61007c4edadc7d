"""Every dataset kind `prepare` makes works with `info`, `preview` and `lint` (issue 15)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from energon_lite.cli import main


@pytest.fixture
def run(capsys):
    """``energon-lite ARGS`` in this process: returncode, stdout and stderr."""

    def call(*args: str) -> SimpleNamespace:
        code = main(list(args))
        out, err = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=out, stderr=err)

    return call


def test_video_text_table_with_every_command(tmp_path: Path, run) -> None:
    pytest.importorskip("av")
    from energon_lite.synth.video_text import make_media, write_table

    media = make_media(tmp_path)
    table = write_table(tmp_path / "videos.csv", media, 12)
    lines = table.read_text().splitlines()
    lines[3] = lines[3].replace("media/small.webm", "media/gone.webm")  # row 2: no such file
    lines[4] = lines[4].replace(",48,64,", ",40,64,")  # row 3 (old.avi, 48x64): wrong height
    table.write_text("\n".join(lines) + "\n")
    done = run("prepare", str(table), "--missing-media", "ignore")
    assert done.returncode == 0, done.stderr
    for path in (table, tmp_path / "videos.energon"):
        info = run("info", str(path))
        assert info.returncode == 0, info.stderr
        assert "total: 12 samples" in info.stdout and "video-text table" in info.stdout
        assert "sample type: VideoTextSample" in info.stdout
        preview = run("preview", str(path), "-n", "2")
        assert preview.returncode == 0, preview.stderr
        assert "videos:1" in preview.stdout and "text (<class 'str'>): 'clip 1'" in preview.stdout
        lint = run("lint", str(path), "--quiet")
        assert lint.returncode == 1, lint.stderr
        assert (
            "train: videos:2: " in lint.stdout
            and "media/gone.webm: media file does not exist" in lint.stdout
        )
        assert (
            "videos:3: " in lint.stdout and "the table says 64x40, the file is 64x48" in lint.stdout
        )
        assert "2 problem(s)" in lint.stdout and "missing tar index" not in lint.stdout


def test_robot_episodes_with_every_command(tmp_path: Path, run) -> None:
    h5py = pytest.importorskip("h5py")
    from energon_lite.synth.episodes import write_dataset

    folder = write_dataset(tmp_path / "episodes", [5, 7], cameras=("top",), images="jpeg")
    assert run("prepare", str(folder)).returncode == 0
    info = run("info", str(folder))
    assert info.returncode == 0, info.stderr
    assert (
        "total: 2 episodes, 12 frames (1 successful)" in info.stdout
        and "cameras: top" in info.stdout
    )
    preview = run("preview", str(folder), "-n", "1")
    assert preview.returncode == 0, preview.stderr
    assert (
        "episode_0.hdf5 #0: 5 frames" in preview.stdout
        and "top[0]: (24, 32, 3) uint8" in preview.stdout
    )
    lint = run("lint", str(folder), "--quiet")
    assert lint.returncode == 0 and "0 problem(s)" in lint.stdout, lint.stdout + lint.stderr
    with h5py.File(folder / "episode_1.hdf5", "r+") as f:
        f["observations/images/top"][4] = 7  # frame 4's JPEG bytes are garbage now
    lint = run("lint", str(folder), "--quiet")
    assert lint.returncode == 1
    assert "episode_1.hdf5 #1: MediaDecodeError" in lint.stdout and "frame 4" in lint.stdout
    assert "1 problem(s)" in lint.stdout
