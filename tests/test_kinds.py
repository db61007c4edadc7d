"""The dataset-kind registry: shipped flavors are found, a new kind plugs in with one line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from energon_lite import WorkerConfig, get_train_dataset
from energon_lite.errors import ConfigError
from energon_lite.sources.base import Source
from energon_lite.sources.kinds import (
    DatasetKind,
    kind_of,
    open_source,
    register_kind,
    registered_kinds,
)
from energon_lite.sources.leaf import Leaf
from energon_lite.synth.episodes import write_dataset


class LinesSource:
    """A dataset kind made for this test: ``lines.txt``, one text sample per line."""

    def __init__(self, path: Path, split_part: str, **options: Any) -> None:
        self.root = path
        self.split_part = split_part
        self.config = {
            "sample_type": {"__module__": "energon_lite", "__class__": "TextSample"},
            "field_map": {"text": "txt"},
        }
        self.lines = (path / "test-lines.txt").read_text(encoding="utf-8").splitlines()
        self.shard_names = ["lines.txt"]
        self.run_shard = np.zeros(1, dtype=np.int64)
        self.run_start = np.zeros(1, dtype=np.int64)
        self.run_end = np.full(1, len(self.lines), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.lines)

    def read(self, shard_id: int, index: int) -> tuple[str, dict[str, Any]]:
        return f"line{index}", {"txt": self.lines[index].encode()}

    def read_range(self, shard_id: int, start: int, end: int) -> list[tuple[str, dict[str, Any]]]:
        return [self.read(shard_id, i) for i in range(start, end)]

    def fingerprint(self) -> str:
        return str(len(self.lines))


def test_shipped_flavors_are_registered_before_the_tar_fallback() -> None:
    names = [kind.name for kind in registered_kinds()]
    assert {"video_text", "episodes"} <= set(names)
    assert names[-1] == "webdataset"


def test_a_new_kind_plugs_in_with_one_registration(tmp_path: Path) -> None:
    folder = tmp_path / "lines"
    (folder / ".nv-meta").mkdir(parents=True)
    (folder / "test-lines.txt").write_text("\n".join(f"text {i}" for i in range(12)) + "\n")
    register_kind(
        DatasetKind(
            "test-lines", detect=lambda p: (p / "test-lines.txt").is_file(), open=LinesSource
        )
    )
    assert kind_of(folder).name == "test-lines"
    assert isinstance(open_source(Leaf(folder, "train")), Source)
    dataset = get_train_dataset(
        folder,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=4,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        repeat=False,
    )
    texts = sorted(text for batch in dataset for text in batch.text)
    assert texts == sorted(f"text {i}" for i in range(12))


def test_a_kind_without_an_opener_names_where_to_load_it(tmp_path: Path) -> None:
    pytest.importorskip("h5py")
    write_dataset(tmp_path / "episodes", [6, 6])
    with pytest.raises(ConfigError, match=r"episodes dataset.*create_qc_dataloader_v3"):
        get_train_dataset(
            tmp_path / "episodes",
            worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
            batch_size=2,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
        )


def test_video_parts_without_pyav_are_refused_at_open(
    train_ds: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util
    import shutil

    import yaml

    from energon_lite.decode.decoder import require_av

    folder = tmp_path / "videos"
    shutil.copytree(train_ds, folder)
    config = folder / ".nv-meta" / "dataset.yaml"
    content = yaml.safe_load(config.read_text())
    content["sample_type"]["__class__"] = "VidQASample"
    content["field_map"] = {"video": "mp4", "context": "txt"}
    config.write_text(yaml.safe_dump(content))
    real = importlib.util.find_spec
    monkeypatch.setattr(  # this process has PyAV; pretend it does not
        importlib.util, "find_spec", lambda name, *a: None if name == "av" else real(name, *a)
    )
    with pytest.raises(ConfigError, match=r"videos holds video/audio.*energon-lite\[av\]"):
        get_train_dataset(
            folder,
            worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
            batch_size=2,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
        )
    require_av("images", frozenset({"jpg", "txt"}))  # no video part: nothing needed


def _crude_tar(root: Path, parts: dict[str, bytes]) -> Path:
    """A prepared crude dataset of 8 samples, each with ``parts`` (name -> bytes)."""
    import io
    import tarfile

    from energon_lite import prepare_dataset

    (root / "parts").mkdir(parents=True)
    with tarfile.open(root / "parts/data-0.tar", "w") as tar:
        for idx in range(8):
            for part, data in parts.items():
                info = tarfile.TarInfo(f"{idx:06d}.{part}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    prepare_dataset(root, split_ratio=[("train", 1)], sample_type="CrudeWebdataset", progress=False)
    return root


def test_a_crude_dataset_needs_pyav_only_for_the_video_it_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crude dataset's parts are known only when a sample is decoded: without PyAV, one of
    text opens and loads; one with an mp4 part is refused when that part is decoded, naming it."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(  # this process has PyAV; pretend it does not
        importlib.util, "find_spec", lambda name, *a: None if name == "av" else real(name, *a)
    )
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    options: dict[str, Any] = dict(batch_size=None, shuffle_buffer_size=None, max_samples_per_sequence=None)  # fmt: skip
    text = _crude_tar(tmp_path / "text", {"txt": b"hello", "json": b'{"a": 1}'})
    samples = list(get_train_dataset(text, worker_config=wc, repeat=False, **options))
    assert len(samples) == 8 and samples[0]["txt"] == "hello" and samples[0]["json"] == {"a": 1}
    video = _crude_tar(
        tmp_path / "video", {"txt": b"a clip", "mp4": b"not decoded before the check"}
    )
    dataset = get_train_dataset(video, worker_config=wc, repeat=False, **options)  # opens
    with pytest.raises(ConfigError, match=r"part 'mp4' holds video/audio.*energon-lite\[av\]"):
        next(iter(dataset))


PLUGIN_MODULE = """
from energon_lite.sources.kinds import DatasetKind, register_kind

KIND = register_kind(DatasetKind({name!r}, detect=lambda path: {detect}))
"""


def _install_plugin(
    site: Path, dist: str, module: str, kind: str, detect: str = 'path.suffix == ".plug"'
) -> None:
    """A distribution in ``site`` as pip lays one out: its module and a dist-info folder whose
    entry_points.txt names the dataset-kind group."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(PLUGIN_MODULE.format(name=kind, detect=detect))
    info = site / f"{dist}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[console_scripts]\n{dist}-cli = {module}:KIND\n\n"
        f"[energon_lite.dataset_kinds]\n{kind} = {module}:KIND\n"
    )


def test_a_kind_of_an_installed_package_is_found_by_its_entry_point(tmp_path: Path) -> None:
    """A package's entry point registers its kind in a fresh process (the registry reads only
    the distributions that name the group); an older copy of the same distribution later on
    the path is shadowed, as importlib.metadata shadows it."""
    _install_plugin(tmp_path / "site", "plugkind", "plugkind_mod", "plugged")
    _install_plugin(tmp_path / "old", "plugkind", "plugkind_old", "shadowed")
    code = (
        "import sys; from pathlib import Path\n"
        f"sys.path[:0] = [{str(tmp_path / 'site')!r}, {str(tmp_path / 'old')!r}]\n"
        "from energon_lite.sources.kinds import kind_of, registered_kinds\n"
        "print(kind_of(Path('data.plug')).name, [k.name for k in registered_kinds()][-2:],"
        " 'plugkind_old' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["plugged", "['plugged',", "'webdataset']", "False"]


def _fresh(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_prepared_tar_folder_is_known_without_importing_the_flavors(
    train_ds: Path, tmp_path: Path
) -> None:
    """No shipped flavor claims a prepared tar folder, so a fresh process knows one by the names
    in its .nv-meta and imports no flavor; another kind's marker there sends the folder to the
    flavors, which decide as before."""
    assert [kind.name for kind in registered_kinds() if kind.detect(train_ds)] == ["webdataset"]
    marked = tmp_path / "marked"
    shutil.copytree(train_ds, marked)
    (marked / ".nv-meta" / "video_text.json").write_text("{}")
    code = (
        "import sys; from pathlib import Path\n"
        "from energon_lite.sources.kinds import kind_of\n"
        "def flavors(): return sorted(m for m in sys.modules if m.startswith('energon_lite.flavors'))\n"
        f"print(kind_of(Path({str(train_ds)!r})).name, len(flavors()))\n"
        f"print(kind_of(Path({str(marked)!r})).name, 'energon_lite.flavors.video_text.kind' in flavors())\n"
    )  # fmt: skip
    assert _fresh(code) == ["webdataset", "0", "video_text", "True"]


def test_a_plugin_may_claim_a_prepared_tar_folder(train_ds: Path, tmp_path: Path) -> None:
    """Where the environment has kind plugins they are asked about every path, prepared tar
    folders included."""
    detect = "(path / '.nv-meta' / '.info.json').is_file()"
    _install_plugin(tmp_path / "site", "tarplug", "tarplug_mod", "tar-plugged", detect)
    code = (
        f"import sys; sys.path[:0] = [{str(tmp_path / 'site')!r}]\n"
        "from pathlib import Path; from energon_lite.sources.kinds import kind_of\n"
        f"print(kind_of(Path({str(train_ds)!r})).name)\n"
    )
    assert _fresh(code) == ["tar-plugged"]
