"""Crude tar datasets cooked with aux sources (another prepared dataset, a plain folder), the
primary dataset and the cache pool: Energon's crude-data scenario on real shards."""

from __future__ import annotations

import io
import pickle
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from energon_lite import (
    Cooker,
    DefaultTaskEncoder,
    Sample,
    TextSample,
    WorkerConfig,
    basic_sample_keys,
    get_loader,
    get_savable_loader,
    get_train_dataset,
    prepare_dataset,
    stateless,
)
from energon_lite.cache import FileStoreCachePool, Lazy, WebdatasetFileStore
from energon_lite.errors import DatasetFormatError
from energon_lite.samples.crude import CrudeSample
from energon_lite.task_encoder.cooking import cooker
from energon_lite.testing import assert_loader_resumes


def _crude_dataset(root: Path, offset: int, subflavors: str = "") -> Path:
    (root / "parts").mkdir(parents=True)
    for shard in range(6):
        with tarfile.open(root / f"parts/data-{shard}.tar", "w") as tar:
            for idx in range(shard * 10, min(55, shard * 10 + 10)):
                key = f"{idx + offset:06d}"
                for part, data in (
                    ("txt", f"{idx + offset}".encode()),
                    ("pkl", pickle.dumps({"idx": idx + offset})),
                ):
                    info = tarfile.TarInfo(f"{key}.{part}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    prepare_dataset(root, split_ratio=[("train", 1)], sample_type="CrudeWebdataset", progress=False)
    if subflavors:
        with open(root / ".nv-meta/dataset.yaml", "a") as file:
            file.write(f"subflavors: {subflavors}\n")
    return root


@pytest.fixture(scope="module")
def crude(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("crude")
    _crude_dataset(root / "ds1", 0, "{number: 42}")
    _crude_dataset(root / "ds2", 100)
    (root / "notes").mkdir()
    (root / "notes/hello.txt").write_text("hello from a folder")
    (root / "aux.yaml").write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        "    path: ds1\n    aux:\n      pkl_source: ds2\n      fs_source: filesystem://notes\n"
        "    subflavors:\n      crude_type: aux_random_access\n"
    )
    (root / "two.yaml").write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        "      - {path: ds1, weight: 1, subflavors: {crude_type: txtpkl}}\n"
        "      - {path: ds2, weight: 1, subflavors: {crude_type: otherpkl}}\n"
    )
    return root


@stateless
def cook_text(sample: dict) -> TextSample:
    return TextSample(**basic_sample_keys(sample), text=f"<{sample['txt']}>")


@stateless
def cook_other(sample: dict) -> TextSample:
    value = pickle.loads(sample["pkl"])  # .pkl is not an extension the decoder knows
    return TextSample(**basic_sample_keys(sample), text=f"<{sample['txt']}|{value['idx']}>")


def cook_aux(sample: dict, pkl_source, fs_source) -> TextSample:
    other = pkl_source.get(f"{int(sample['txt']) + 100:06d}.txt", sample)
    note = fs_source.get("hello.txt", sample)
    return TextSample(**basic_sample_keys(sample), text=f"<{sample['txt']}|aux|{other}|{note}>")


class CookingEncoder(DefaultTaskEncoder):
    cookers = (
        Cooker(cook_text, has_subflavors={"crude_type": "txtpkl"}),
        Cooker(cook_other, has_subflavors={"crude_type": "otherpkl"}),
        Cooker(cook_aux, has_subflavors={"crude_type": "aux_random_access"}),
    )


def _train(path: Path, encoder, workers: int = 0, **kwargs):
    return get_train_dataset(
        path,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=workers, seed_offset=3),
        batch_size=kwargs.pop("batch_size", 2),
        shuffle_buffer_size=None,
        max_samples_per_sequence=kwargs.pop("max_samples_per_sequence", None),
        task_encoder=encoder,
        **kwargs,
    )


def test_cookers_are_chosen_by_subflavors(crude: Path) -> None:
    texts = [
        t
        for _, b in zip(range(40), get_loader(_train(crude / "two.yaml", CookingEncoder())))
        for t in b.text
    ]
    assert {t.count("|") for t in texts} == {0, 1}
    for text in texts:
        number = int(re.match(r"<(\d+)", text).group(1))
        assert text == (f"<{number}>" if number < 100 else f"<{number}|{number}>")


def test_a_cooker_reads_aux_media_by_name(crude: Path) -> None:
    batches = [
        b for _, b in zip(range(30), get_loader(_train(crude / "aux.yaml", CookingEncoder())))
    ]
    for batch in batches:
        for text in batch.text:
            m = re.fullmatch(r"<(\d+)\|aux\|(\d+)\|hello from a folder>", text)
            assert m and int(m.group(2)) == int(m.group(1)) + 100
    sources = batches[0].__sources__
    assert any(s.dataset_path.name == "ds2" and s.file_names[0].endswith(".txt") for s in sources)
    assert any(s.file_names == ("hello.txt",) for s in sources)


@dataclass
class LazyText(Sample):
    txt: str = ""
    next_txt: Lazy | None = None


@stateless
@cooker(need_cache=True, need_primary=True)
def cook_lazy(sample: dict, primary, pkl_source, fs_source, cache) -> LazyText:
    own = primary.get(".pkl", sample)  # a part of this very sample, by random access
    assert own == sample["pkl"]
    following = cache.get_lazy(primary, f"{(int(sample['txt']) + 1) % 55:06d}.txt")
    return LazyText(**basic_sample_keys(sample), txt=sample["txt"], next_txt=following)


class LazyEncoder(DefaultTaskEncoder):
    cookers = (Cooker(cook_lazy),)

    def select_samples_to_pack(self, samples: list) -> list:
        return [[s] for s in samples]

    def pack_selected_samples(self, samples: list) -> TextSample:
        (sample,) = samples
        return TextSample(
            **basic_sample_keys(sample),
            text=f"{sample.txt}|{sample.next_txt.get(sample)}|{type(sample.next_txt).__name__}",
        )


@pytest.mark.parametrize("workers", [0, 2])
def test_primary_aux_and_cache_pool_resume_exactly(
    crude: Path, tmp_path: Path, workers: int
) -> None:
    def make():
        return get_savable_loader(
            _train(crude / "aux.yaml", LazyEncoder(), workers, packing_buffer_size=2,
                   max_samples_per_sequence=5),
            cache_pool=FileStoreCachePool(parent_cache_dir=tmp_path / "cache", num_workers=1),
        )  # fmt: skip

    batches = [b for _, b in zip(range(20), make())]
    for text in (t for b in batches for t in b.text):
        first, second, kind = text.split("|")
        assert int(second) == (int(first) + 1) % 55
        assert kind == "FileCacheLazy"  # went through the pool
    assert_loader_resumes(make, total=16, save_points=[0, 5, 11])


def test_webdataset_file_store_reads_by_key(crude: Path) -> None:
    store = WebdatasetFileStore(crude / "ds2")
    assert store["000154.txt"][0] == b"154"
    assert pickle.loads(store["000100.pkl"][0]) == {"idx": 100}
    assert (crude / "ds2/.nv-meta/key_index.npy").is_file()  # built once, saved
    with pytest.raises(DatasetFormatError, match="no sample with key '000999'"):
        store["000999.txt"]
    with pytest.raises(DatasetFormatError, match="has no part 'jpg'"):
        store["000101.jpg"]


def test_crude_samples_are_crude_sample_dicts(crude: Path) -> None:
    seen = []

    def keep(sample: dict) -> TextSample:
        seen.append(sample)
        return TextSample(**basic_sample_keys(sample), text=sample["txt"])

    class Encoder(DefaultTaskEncoder):
        cookers = (Cooker(keep),)

    next(iter(get_loader(_train(crude / "ds1", Encoder()))))
    assert isinstance(seen[0], CrudeSample) and seen[0]["__subflavors__"] == {"number": 42}
    assert seen[0]["txt"] == str(int(seen[0]["__key__"]))  # .txt decoded by extension
    assert pickle.loads(seen[0]["pkl"]) == {"idx": int(seen[0]["txt"])}


def test_energon_prepared_crude_datasets_cook_the_same(crude: Path, tmp_path: Path) -> None:
    flavors = pytest.importorskip("megatron.energon.flavors")
    import shutil

    for name in ("ds1", "ds2"):
        shutil.copytree(crude / name / "parts", tmp_path / name / "parts")
        flavors.BaseWebdatasetFactory.prepare_dataset(
            tmp_path / name, ["parts/data-{0..5}.tar"], split_parts_ratio=[("train", 1.0)],
            shuffle_seed=None, workers=1,
        )  # fmt: skip
        assert (tmp_path / name / ".nv-meta/index.sqlite").is_file()  # really Energon's
        (tmp_path / name / ".nv-meta/dataset.yaml").write_text(
            "__module__: megatron.energon\n__class__: CrudeWebdataset\n"
        )
    shutil.copytree(crude / "notes", tmp_path / "notes")
    shutil.copy(crude / "aux.yaml", tmp_path / "aux.yaml")

    def texts(root: Path) -> list[str]:
        dataset = _train(root / "aux.yaml", CookingEncoder(), repeat=False)
        return sorted(t for batch in get_loader(dataset) for t in batch.text)

    assert texts(tmp_path) == texts(crude)
    assert len(texts(tmp_path)) == 55


@pytest.mark.parametrize("trouble", ["folder deleted", "disk full"])
def test_a_cache_pool_in_trouble_costs_no_sample(
    crude: Path, tmp_path: Path, trouble: str, request: pytest.FixtureRequest
) -> None:
    """Every one of the 55 samples comes back, each with its lazily cached neighbour, when
    the pool's folder is deleted mid-run (before: most were skipped, FileNotFoundError) or
    its disk is full (before: skipped for ENOSPC, and temp files kept the disk full)."""
    import shutil

    parent = request.getfixturevalue("small_disk") if trouble == "disk full" else tmp_path
    pool = FileStoreCachePool(parent_cache_dir=parent, num_workers=1)
    loader = get_loader(
        _train(crude / "aux.yaml", LazyEncoder(), 0, packing_buffer_size=2, repeat=False),
        cache_pool=pool,
    )
    if trouble == "disk full":
        with open(parent / "filler", "wb", buffering=0) as filler, pytest.raises(OSError):
            while True:  # fill the disk: every later write to it fails with ENOSPC
                filler.write(b"\0" * 4096)
    texts = []
    try:
        for batch in loader:
            texts += batch.text
            if trouble == "folder deleted" and len(texts) == 10:
                shutil.rmtree(parent / "energon_lite_cache")
    finally:
        pool.close()
    assert len(texts) == 55
    for text in texts:
        first, second, _ = text.split("|")
        assert int(second) == (int(first) + 1) % 55
    assert not list(pool.cache_dir.glob("*"))  # no orphaned temps, no staged file left
