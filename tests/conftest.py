"""Shared fixtures: real prepared JPEG+caption datasets in temporary folders."""

from __future__ import annotations

import contextlib
import gc
import importlib.metadata
import importlib.util
import io
import subprocess
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from packaging.requirements import Requirement

from energon_lite import prepare_dataset
from energon_lite.synth.shards import write_captioning_shards

# A warning the run did not expect fails it (after its summary lists the warning): each is
# fixed at its cause, or filtered in pyproject.toml's filterwarnings with the reason it
# cannot be avoided. With pytest-xdist the controller sees every worker's warnings.
_WARNINGS: list[str] = []


def pytest_warning_recorded(
    warning_message: warnings.WarningMessage, when: str, nodeid: str, location: object
) -> None:
    _WARNINGS.append(f"{nodeid or when}: {warning_message.category.__name__}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _WARNINGS and not hasattr(terminalreporter.config, "workerinput"):
        terminalreporter.write_line(
            f"{len(_WARNINGS)} warning(s) (listed above) fail the run: fix each at its cause, "
            "or filter it in pyproject.toml's filterwarnings with the reason",
            red=True,
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _WARNINGS and exitstatus == 0 and not hasattr(session.config, "workerinput"):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# Test modules that leave their xdist worker holding large libraries (the S3 server and
# clients, Arrow, torch's distributed checkpoint, matplotlib, the trainers of the runnable
# guides; each imports them when it runs, not at collection: installed_or_skip below): they
# run after the others, so that the many loaders with forked workers before them fork from
# a smaller process. Forking and the copy-on-write faults after it cost system time in
# proportion to what the parent holds; the order changes no test's outcome (xdist already
# orders tests freely).
_HEAVY_LAST = ("test_docs", "test_remote", "test_tables", "test_msc_", "test_prepare_cluster",
               "test_shard_cache", "test_storage_session", "test_deep_imports", "test_stateful",
               "test_cli_checkpoint_dcp", "test_bench_report")  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.path.stem.startswith(_HEAVY_LAST))


def installed_or_skip(*modules: str, reason: str | None = None) -> None:
    """Skip the calling test module unless each of ``modules`` is installed, found without
    importing it (``pytest.importorskip`` imports it). Every xdist worker collects every
    module: a library imported at collection would sit in both workers from the start, and
    each loader before the modules that use it would fork from a process that much larger
    (S3's moto and s3fs, Arrow and Hugging Face datasets, torch's distributed checkpoint,
    matplotlib, h5py, megatron-energon: a worker held 490 MiB after collecting with them,
    306 MiB without). The tests import what they use when they run."""
    for name in modules:
        if importlib.util.find_spec(name) is None:
            pytest.skip(reason or f"{name} is not installed", allow_module_level=True)


class _OnFirstUse:
    """A module imported when a test first takes a name from it (see ``oracle``)."""

    def __init__(self, name: str) -> None:
        self.__name__ = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_") and attr != "__all__":  # what pytest probes a global for
            raise AttributeError(attr)
        return getattr(importlib.import_module(self.__name__), attr)

    def __repr__(self) -> str:
        return f"<module {self.__name__!r}, imported on first use>"


def oracle(name: str = "megatron.energon", *needs: str, reason: str | None = None) -> Any:
    """megatron-energon's module ``name`` (the oracle of the compatibility tests), imported
    when a test first uses it, not at collection; the calling test module skips unless
    megatron-energon and ``needs`` are installed (``installed_or_skip``). Collected by every
    xdist worker, the import would cost each about a second of CPU and leave it 37 MiB
    larger, for every loader it forks before the Energon tests run."""
    installed_or_skip("megatron.energon", *needs, reason=reason)
    return _OnFirstUse(name)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """``energon-lite ARGS`` in this process: its exit status, stdout and stderr, as a
    subprocess would give them, without an interpreter start and imports per call (tests
    that need the real process, a terminal or a signal still start one)."""
    from energon_lite.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit:  # argparse's usage errors
            code = exit.code if isinstance(exit.code, int) else 1
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def extra_installed(extra: str) -> bool:
    """Whether every package of energon-lite's ``extra`` extra is installed (as the test
    command installs the extras it names)."""
    try:
        requires = importlib.metadata.requires("energon-lite") or []
    except importlib.metadata.PackageNotFoundError:
        return False
    wanted = [
        r.name
        for r in map(Requirement, requires)
        if r.marker is not None
        and r.marker.evaluate({"extra": extra})
        and not r.marker.evaluate({"extra": ""})
    ]
    try:
        for name in wanted:
            importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return bool(wanted)


@contextlib.contextmanager
def energons_loader(loader: Any) -> Iterator[Any]:
    """Energon's ``loader`` (megatron-energon, the oracle), its worker processes shut down on
    leaving (ours, given here too, shuts its own down when dropped). Energon keeps torch's iterator (persistent workers) until the garbage collector
    finalises the loader's reference cycle, in no set order: a queue finalised first makes
    torch wait out its join timeout, 5 s per worker, idle, in whichever later test the
    collector happens to run."""
    try:
        yield loader
    finally:
        shut_down = getattr(getattr(loader, "_iterator", None), "_shutdown_workers", None)
        if shut_down is not None:
            shut_down()


@pytest.fixture
def collector_spared() -> Iterator[None]:
    """The test process's objects frozen (``gc.freeze``) for the test: Energon collects
    garbage in full at every ``get_loader`` call, and its loaders without worker processes
    (``GcDataset``) every few batches, in this process; frozen, each collection looks at the
    test's own objects only, not at everything the session holds (a tenth of a second each),
    and a worker forked meanwhile does not collect them either. Garbage the test makes is
    still collected. A process that froze objects itself is left as it is."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


T = TypeVar("T")


def writer_library(load: Callable[[], T], library: str, extra: str) -> T:
    """``load()``, the import of a third-party library a test writes its data with. Where it
    is missing the test skips, naming it; where energon-lite's ``extra`` extra is installed
    (the test command's environment, which installs ``library`` beside it) it fails instead,
    since there a skip would hide a broken install."""
    try:
        return load()
    except ImportError as exc:
        missing = str(exc)
    how = "the test command installs it (README.md, 'Run the tests')"
    if extra_installed(extra):
        message = f"{library} does not import ({missing}) though the {extra} extra is installed"
        pytest.fail(f"{message}; {how}", pytrace=False)
    pytest.skip(f"{library} is not installed ({missing}); {how}")


def make_dataset(
    root: Path,
    num_samples: int = 120,
    samples_per_shard: int = 20,
    split_ratio: list[tuple[str, float]] | None = None,
    *,
    image_size: tuple[int, int] = (16, 16),
    with_json: bool = True,
    quality: int = 90,
    **kwargs,
) -> Path:
    """Write and prepare a captioning dataset; every shard in train unless ``split_ratio``
    (``kwargs`` go to ``prepare_dataset``)."""
    write_captioning_shards(
        root, num_samples, samples_per_shard, image_size=image_size, with_json=with_json,
        quality=quality,
    )  # fmt: skip
    prepare_dataset(
        root,
        split_ratio=split_ratio or [("train", 1)],
        sample_type="CaptioningSample",
        field_map={"image": "jpg", "caption": "txt"},
        progress=False,
        **kwargs,
    )
    return root


def open_and_read(root: Path, split: str = "train", first: str | None = None):
    """Open a split and read the first sample of each of its shards (shard ``first``
    before the others): a shard is checked against the record when it is first read."""
    import numpy as np

    from energon_lite.shards.dataset import PreparedDataset

    ds = PreparedDataset(root, split)
    shard_ids = sorted(
        (int(s) for s in np.unique(ds.run_shard)), key=lambda s: ds.shard_names[s] != first
    )
    for shard_id in shard_ids:
        ds.read(shard_id, 0)
    return ds


def read_split(root: Path, split: str = "train") -> list:
    """Every sample of a split once, in the reader's order: 0 workers, no batches, no
    shuffle buffer, no repeat."""
    from energon_lite import WorkerConfig, get_loader, get_train_dataset

    dataset = get_train_dataset(
        root,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=None,
        split_part=split,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        repeat=False,
    )
    return list(get_loader(dataset))


def write_text_leaves(root: Path, counts: dict[str, int], per_shard: int, digits: int) -> None:
    """Prepared text datasets ``root/NAME`` (train only) of ``counts[NAME]`` samples in
    shards of ``per_shard``, keyed ``NAME`` + the index in ``digits`` digits."""
    for name, count in counts.items():
        write_captioning_shards(
            root / name, count, per_shard, image_size=(8, 8), key_format=f"{name}{{:0{digits}d}}"
        )
        prepare_dataset(
            root / name,
            split_ratio=[("train", 1)],
            sample_type="TextSample",
            field_map={"text": "txt"},
            progress=False,
        )


def write_two_leaves(root: Path, a: int = 120, b: int = 80) -> dict[str, Path]:
    """Two text datasets (``a`` and ``b`` samples, shards of 20, keys ``a00000``...,
    ``b00000``...) and two metadatasets over them: ``weighted`` (blend 2:1) and
    ``epochized`` (``blend_epochized`` 1 and 0.5 repetitions)."""
    write_text_leaves(root, {"a": a, "b": b}, 20, 5)
    head = "__module__: energon_lite\n__class__: MetadatasetV2\nsplits:\n  train:\n"
    (root / "weighted.yaml").write_text(
        head + "    blend:\n      - {weight: 2, path: a}\n      - {weight: 1, path: b}\n"
    )
    (root / "epochized.yaml").write_text(
        head + "    blend_epochized:\n      - {repetitions: 1, path: a}\n"
        "      - {repetitions: 0.5, path: b}\n"
    )
    return {
        "a": root / "a",
        "weighted": root / "weighted.yaml",
        "epochized": root / "epochized.yaml",
    }


@pytest.fixture(scope="session")
def train_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """120 samples in 6 shards of 20, all in train."""
    return make_dataset(tmp_path_factory.mktemp("train_ds"))


@pytest.fixture(scope="session")
def many_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """600 samples: buffers long enough (over 128 keys) to travel as changes."""
    return make_dataset(tmp_path_factory.mktemp("many_ds"), 600, 50, image_size=(8, 8))


@pytest.fixture(scope="session")
def split_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """200 samples in 10 shards, split 8/1/1 into train/val/test."""
    return make_dataset(
        tmp_path_factory.mktemp("split_ds"), 200, 20, [("train", 8), ("val", 1), ("test", 1)]
    )


@pytest.fixture(scope="session")
def text_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """200 caption samples ("sample i: w1 w2 ...") as TextSample, in 10 shards, all in train."""
    root = tmp_path_factory.mktemp("text_ds")
    write_captioning_shards(root, 200, 20, image_size=(8, 8))
    prepare_dataset(
        root,
        split_ratio=[("train", 1)],
        sample_type="TextSample",
        field_map={"text": "txt"},
        progress=False,
    )
    return root


@pytest.fixture
def dataset_factory():
    """``make_dataset`` as a fixture, for tests that need datasets of their own."""
    return make_dataset


@pytest.fixture
def small_disk(tmp_path: Path):
    """A real 256 KiB filesystem (tmpfs): writes past it fail with ENOSPC."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:  # a file a failed test left open keeps it busy: then detach it lazily
        if subprocess.run(["umount", str(mount)], capture_output=True, timeout=30).returncode:
            subprocess.run(
                ["umount", "-l", str(mount)], capture_output=True, timeout=30, check=True
            )
