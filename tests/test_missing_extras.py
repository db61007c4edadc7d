"""A missing optional dependency names the extra that installs it (issue 26, item 8).

Each check runs in a fresh interpreter where the module cannot be imported: ``sys.modules[name]
= None`` makes Python's import fail exactly as it does when the package is not installed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def _without(module: str, code: str) -> subprocess.CompletedProcess:
    blocker = f"import sys; sys.modules[{module!r}] = None\n"
    return subprocess.run(
        [sys.executable, "-c", blocker + code], capture_output=True, text=True, timeout=120
    )


def test_import_av_without_pyav_names_the_extra() -> None:
    done = _without(
        "av",
        "try:\n"
        "    import energon_lite.av\n"
        "except ImportError as exc:\n"  # still an ImportError for code that guards the import
        "    print(type(exc).__name__, exc.name, exc)\n",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("MissingExtraError av "), done.stdout
    assert "pip install 'energon-lite[av]'" in done.stdout
    assert "PyAV" in done.stdout


def test_prepare_episodes_without_h5py_names_the_extra(tmp_path: Path) -> None:
    pytest.importorskip("h5py")  # to write the episodes; the command then runs without it
    from energon_lite.synth.episodes import write_episode

    for i in range(2):
        write_episode(tmp_path / f"ep{i}.hdf5", 4, episode_id=i)
    done = _without(
        "h5py",
        f"from energon_lite.cli import main\nsys.exit(main(['prepare', {str(tmp_path)!r}]))\n",
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "energon-lite prepare: error: robot episodes (HDF5 files) needs h5py, which is not "
        "installed: pip install 'energon-lite[h5]'"
    )
    assert "please report it" not in done.stderr and "scanning" not in done.stderr


def test_an_image_dataset_trains_without_pyav(train_ds: Path) -> None:
    """PyAV is the ``av`` extra: a dataset of images and captions loads without it (finding
    the dataset's kind imported every flavor package, and ``flavors.webdataset`` PyAV)."""
    done = _without(
        "av",
        "from energon_lite import get_savable_loader, get_train_dataset, WorkerConfig\n"
        f"ds = get_train_dataset({str(train_ds)!r}, batch_size=4, shuffle_buffer_size=None,\n"
        "    max_samples_per_sequence=None, worker_config=WorkerConfig(rank=0, world_size=1,\n"
        "    num_workers=0))\n"
        "loader = get_savable_loader(ds)\n"
        "batch = next(iter(loader))\n"
        "print(len(batch.__key__), 'av' in sys.modules and sys.modules['av'] is not None)\n",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["4", "False"]
