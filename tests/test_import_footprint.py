"""A plain tar image loop imports only what its chain uses (issue 42).

Time to the first batch from the interpreter's start is mostly imports, so the modules a loop
over a prepared tar folder loads are checked here (in a fresh interpreter, through
``sys.modules``): no video, audio, HDF5, table, remote-storage, CLI or report module, and no
module of another dataset kind (a prepared tar folder is known by its ``.nv-meta`` without
asking the flavors, ``sources/kinds.py``). With workers, the main process builds the loader and
the plan only: the decode stack, the chain's stages and the tar reader load in the workers.
The time itself is measured by benchmarks/bench_peers.py ("from interpreter start"), not asserted here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# third-party packages of the optional extras (video, audio, HDF5, tables, remote storage)
HEAVY_PACKAGES = (
    "av",
    "h5py",
    "pyarrow",
    "pandas",
    "soundfile",
    "torchaudio",
    "decord",
    "boto3",
    "s3fs",
    "fsspec",
    "gcsfs",
    "adlfs",
    "multistorageclient",
    "braceexpand",  # brace patterns in a split: a prepared split lists plain names
)
# the most of our own modules the loop may load in its main process: at 0 workers the whole
# chain runs there (105 when this was set); at 2 workers only the loader and the plan (96:
# the readers, the task encoder, the state). A change that adds one to every plain loop raises
# these on purpose, with its cost measured by benchmarks/bench_first_batch.py
MAX_OURS = {0: 105, 2: 96}
# what only a running chain uses: the decode stack (with Pillow and the JPEG backend), the
# chain's stages past the reader, the tar reader and the collate functions. At num_workers > 0
# the main process builds the readers and the task encoder but reads, decodes and batches
# nothing, so these load in the workers only; at 0 workers the main process runs the chain
# and loads each of them (checked too, so that this list names modules that exist and load)
CHAIN_ONLY = (
    "energon_lite.decode.image",
    "energon_lite.decode.jpeg_turbo",
    "energon_lite.decode.resize",
    "energon_lite.stages.encode",
    "energon_lite.stages.batch",
    "energon_lite.stages.shuffle",
    "energon_lite.stages.buffer",
    "energon_lite.shards.tar",
    "energon_lite.batching.collate",
    "energon_lite.batching.slab",
    "PIL",
)
# our modules that only other features use
HEAVY_OURS = (
    "energon_lite.av",  # video and audio decoding
    "energon_lite.media",  # media metadata
    "energon_lite.cli",  # the command line
    "energon_lite.cache",  # cookers' file stores and the cache pool
    "energon_lite.storage.clients",  # remote object stores
    "energon_lite.storage.msc",  # MSC profiles
    "energon_lite.loader.energon_tree",  # Energon's tree view of a dataset
    "energon_lite.loader.stats_report",  # metrics, printed on request
    "energon_lite.loader.mix_report",
    "energon_lite.resume.restore",  # restoring a state
    "energon_lite.resume.elastic",
    "energon_lite.resume.relayout",
    "energon_lite.resume.ownership",
    "energon_lite.metadataset",  # metadataset YAML, join specs
    "energon_lite.flavors",  # the other dataset kinds, their kind modules included
    "energon_lite.wrappers",  # Energon's wrapper classes
    "energon_lite.transforms",
    # stages a plain chain (reader, shuffle, encode, batch) does not have
    "energon_lite.stages.blend_epochized",
    "energon_lite.stages.blend_weighted",
    "energon_lite.stages.bucket_sync",
    "energon_lite.stages.concat",
    "energon_lite.stages.cost",
    "energon_lite.stages.group_batch",
    "energon_lite.stages.limit",
    "energon_lite.stages.map",
    "energon_lite.stages.pack",
    "energon_lite.stages.phases",
    "energon_lite.stages.routing",  # per-source grouping
)

LOOP = """
import sys
import energon_lite as el

wc = el.WorkerConfig(rank=0, world_size=1, num_workers={workers})
ds = el.get_train_dataset({root!r}, worker_config=wc, batch_size=4, shuffle_buffer_size=8,
                          max_samples_per_sequence=8)
loader = el.{make}(ds)
batch = next(iter(loader))
assert len(batch.__key__) == 4, batch.__key__
print(" ".join(sorted(sys.modules)))
"""


@pytest.fixture(scope="module")
def tar_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from energon_lite.shards.prepare import prepare_dataset
    from energon_lite.synth.shards import write_captioning_shards

    root = tmp_path_factory.mktemp("footprint") / "ds"
    write_captioning_shards(root, 40, 10, image_size=(8, 8))
    prepare_dataset(root, split_ratio=[("train", 1)], sample_type="CaptioningSample",
                    field_map={"image": "jpg", "caption": "txt"}, progress=False)  # fmt: skip
    return root


def _loaded(root: Path, workers: int, make: str) -> set[str]:
    code = LOOP.format(root=str(root), workers=workers, make=make)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    # the loop exits with its loader open, as a short script does: quietly
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    return set(done.stdout.split())


def _heavy(loaded: set[str]) -> list[str]:
    def under(name: str, package: str) -> bool:
        return name == package or name.startswith(package + ".")

    return sorted(
        name for name in loaded if any(under(name, p) for p in (*HEAVY_PACKAGES, *HEAVY_OURS))
    )


@pytest.mark.parametrize(
    ("workers", "make"), [(0, "get_loader"), (2, "get_loader"), (2, "get_savable_loader")]
)
def test_a_plain_tar_loop_imports_no_heavy_module(
    tar_folder: Path, workers: int, make: str
) -> None:
    loaded = _loaded(tar_folder, workers, make)
    # the loop ran through the chain it should (these are loaded, so the check sees them)
    assert {"energon_lite.stages.reader", "energon_lite.shards.dataset", "torch"} <= loaded
    assert _heavy(loaded) == []
    # of the built-in sample types, only the one the dataset names is made
    builtin = sorted(name for name in loaded if name.startswith("energon_lite.samples.builtin."))
    assert builtin == ["energon_lite.samples.builtin.captioning"]
    ours = sorted(name for name in loaded if name.split(".")[0] == "energon_lite")
    assert len(ours) <= MAX_OURS[workers], ours
    chain = sorted(name for name in CHAIN_ONLY if name in loaded)
    # the main process runs the chain only without workers
    assert chain == ([] if workers else sorted(CHAIN_ONLY))
    if workers:  # (at 0 workers only where the JPEG backend is simplejpeg)
        assert "simplejpeg" not in loaded


def test_the_heavy_modules_are_loaded_when_used(tar_folder: Path) -> None:
    """The check above can fail: a tree view loads the tree, and a
    JSONL kind's source its module, through the same lazy paths."""
    code = LOOP.format(root=str(tar_folder), workers=0, make="get_savable_loader").replace(
        "print(", "loader.save_state_rank(); ds.energon_view(); el.CrudeJsonlDatasetFactory\nprint("
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    heavy = _heavy(set(done.stdout.split()))
    assert "energon_lite.cache.file_store" in heavy  # the JSONL source reads through one
    assert "energon_lite.loader.energon_tree" in heavy
    assert "energon_lite.flavors.jsonl.source" in heavy


def test_a_star_import_of_the_task_encoder_module_still_gives_the_collate_functions() -> None:
    """Energon's ``task_encoder.base`` hands out its collate functions; ours load them lazily,
    and a star import (which reads no module ``__getattr__`` without ``__all__``) must still
    bring them."""
    names: dict[str, object] = {}
    exec("from energon_lite.task_encoder.base import *", names)
    from energon_lite.batching import collate

    for name in (
        "batch_list",
        "batch_pad_stack",
        "batch_stack",
        "default_collate",
        "generic_batch",
    ):
        assert names[name] is getattr(collate, name)
    assert names["TaskEncoder"].__name__ == "TaskEncoder"  # type: ignore[attr-defined]


def test_a_star_import_of_the_sample_types_module_still_gives_the_built_in_types() -> None:
    """The built-in sample types are made on first use; a star import must still bring them."""
    names: dict[str, object] = {}
    exec("from energon_lite.samples.types import *", names)
    from energon_lite.samples import types

    for name in ("CaptioningSample", "ImageSample", "VQASample", "TextSample", "SAMPLE_TYPES"):
        assert names[name] is getattr(types, name)
