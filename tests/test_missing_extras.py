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
