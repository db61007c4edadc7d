"""Energon's deeper module paths resolve under ``energon_lite`` (the import change
``megatron.energon.X`` -> ``energon_lite.X``), to our own objects, with Energon's behaviour.
megatron-energon is the oracle: each mirrored name exists there at the same path."""

from __future__ import annotations

import importlib
import pickle
import warnings
from pathlib import Path
from typing import Any

import pytest
from conftest import oracle

import energon_lite as el
from energon_lite import ConfigError, WorkerConfig, get_savable_loader, get_train_dataset
from energon_lite.epathlib import DEFAULT_PROFILE_NAME, EPath
from energon_lite.errors import DatasetFormatError

energon = oracle()

WRAPPER_MODULES = [
    "batch_dataset",
    "blend_dataset",
    "concat_dataset",
    "epochize_dataset",
    "filter_dataset",
    "gc_dataset",
    "group_batch_dataset",
    "iter_map_dataset",
    "limit_dataset",
    "log_sample_dataset",
    "map_dataset",
    "mix_batch_dataset",
    "packing_dataset",
    "repeat_dataset",
    "shuffle_buffer_dataset",
    "skip",
]

# (module path under megatron.energon / energon_lite, name, our object of that name)
SAME_OBJECTS = [
    ("epathlib", "EPath", EPath),
    ("task_encoder.base", "stateless", el.stateless),
    ("task_encoder.base", "Batch", el.Batch),
    ("task_encoder.base", "TaskEncoder", el.TaskEncoder),
    ("task_encoder.base", "DefaultTaskEncoder", el.DefaultTaskEncoder),
    ("task_encoder.base", "generic_batch", el.generic_batch),
    ("flavors.base_dataset", "Sample", el.Sample),
    ("flavors.base_dataset", "SavableDataset", el.SavableDataset),
    ("flavors.base_dataset", "BaseCoreDatasetFactory", el.BaseCoreDatasetFactory),
    ("worker", "WorkerConfig", el.WorkerConfig),
    ("flavors.webdataset.sample_decoder", "SampleDecoder", el.SampleDecoder),
]


def _mirror(path: str, name: str) -> tuple[Any, Any]:
    ours = getattr(importlib.import_module(f"energon_lite.{path}"), name)
    theirs = getattr(importlib.import_module(f"megatron.energon.{path}"), name)
    return ours, theirs


@pytest.mark.parametrize(("path", "name", "obj"), SAME_OBJECTS)
def test_name_resolves_at_the_mirrored_path(path: str, name: str, obj: Any) -> None:
    ours, theirs = _mirror(path, name)
    assert ours is obj and theirs is not None


def test_task_encoder_base_helpers_behave_as_energons() -> None:
    import torch

    tensors = [torch.ones(2, 3), torch.zeros(1, 4)]
    for name in ("batch_pad_stack", "batch_list"):
        ours, theirs = _mirror("task_encoder.base", name)
        assert str(ours(tensors)) == str(theirs(tensors)), name
    ours, theirs = _mirror("task_encoder.base", "batch_stack")
    assert torch.equal(ours([torch.ones(2)] * 3), theirs([torch.ones(2)] * 3))
    ours, theirs = _mirror("task_encoder.base", "get_stateless")

    def hook(x: Any) -> Any:
        return x

    assert ours(hook) is False and theirs(hook) is False
    assert ours(el.stateless(hook)) is True


def test_webdataset_package_exports_energons_names() -> None:
    ours = importlib.import_module("energon_lite.flavors.webdataset")
    theirs = importlib.import_module("megatron.energon.flavors.webdataset")
    assert set(theirs.__all__) <= set(ours.__all__)
    for name in ours.__all__:
        if name in el.__all__:
            assert getattr(ours, name) is getattr(el, name), name
    assert ours.AVDecoder is el.av.AVDecoder and ours.AVData is el.av.AVData
    assert ours.ImageDecoderType == theirs.ImageDecoderType
    assert ours.AVDecoderType == theirs.AVDecoderType


@pytest.mark.parametrize(
    "name",
    ["MAIN_FOLDER_NAME", "INFO_JSON_FILENAME", "INFO_YAML_FILENAME", "SPLIT_YAML_FILENAME",
     "INDEX_SQLITE_FILENAME"],
)  # fmt: skip
def test_on_disk_names_are_energons(name: str) -> None:
    ours, theirs = _mirror("flavors.webdataset.config", name)
    assert ours == theirs


def test_dataset_config_names() -> None:
    ours, theirs = _mirror("dataset_config", "MAIN_FOLDER_NAME")
    assert ours == theirs == ".nv-meta"
    for name in ("load_config", "get_dataset_from_config"):
        assert all(callable(fn) for fn in _mirror("dataset_config", name))


def test_config_regexes_split_names_as_energons() -> None:
    for regex in ("split_name_re", "skip_meta_re"):
        ours, theirs = _mirror("flavors.webdataset.config", regex)
        for text in ("a/b.c.jpg", "x.txt", "__meta__/k.json", "noext", "d/__x__"):
            left, right = (
                ours.match(text) or ours.search(text),
                theirs.match(text) or theirs.search(text),
            )
            assert (left and left.groups()) == (right and right.groups()), (regex, text)


@pytest.mark.parametrize("module", WRAPPER_MODULES)
def test_wrapper_module_paths(module: str) -> None:
    ours = importlib.import_module(f"energon_lite.wrappers.{module}")
    theirs = importlib.import_module(f"megatron.energon.wrappers.{module}")
    with warnings.catch_warnings():
        # Energon's module namespace holds torch's deprecated `reduce_op` (a star import);
        # asking it for __module__ warns about torch, not about anything of ours
        warnings.simplefilter("ignore", FutureWarning)
        defined = [
            name
            for name, value in vars(theirs).items()
            if getattr(value, "__module__", None) == theirs.__name__ and name in el.__all__
        ]
    assert defined, module
    for name in defined:
        assert getattr(ours, name) is getattr(el, name), (module, name)


def test_blend_mode_at_energons_path() -> None:
    ours, theirs = _mirror("metadataset.loader_interface", "DatasetBlendMode")
    assert [m.name for m in ours] == [m.name for m in theirs]
    from energon_lite.compat.metadataset_api import LoadedDatasetList

    assert LoadedDatasetList([]).blend_mode is ours.NONE


def test_kind_discovery_is_unchanged_by_the_mirror_modules() -> None:
    from energon_lite.sources.kinds import registered_kinds

    names = [kind.name for kind in registered_kinds()]
    assert sorted(names) == sorted(set(names))
    assert "base_dataset" not in names and names.count("webdataset") == 1


# --- EPath ---------------------------------------------------------------------------------


@pytest.mark.parametrize("lib", ["energon_lite", "megatron.energon"])
def test_epath_local_behaviour(lib: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same code through both libraries' EPath (Energon's own test cases)."""
    epath = importlib.import_module(f"{lib}.epathlib").EPath
    monkeypatch.chdir(tmp_path)
    p = epath("sub/../file.bin")
    assert str(p) == str(tmp_path / "file.bin")
    with p.open("wb") as f:
        f.write(b"dummycontent")
    assert p.is_file() and p.size() == 12 and not p.is_dir()
    assert p.read_bytes() == b"dummycontent"
    q = epath(str(tmp_path)) / "dir" / "x.txt"
    q.parent.mkdir()
    q.write_text("héllo")
    assert q.read_text() == "héllo" and q.name == "x.txt" and q.parent.is_dir()
    assert str(q.with_suffix(".json")) == str(tmp_path / "dir" / "x.json")
    assert q.relative_to(epath(str(tmp_path))) == "dir/x.txt"
    assert epath(str(tmp_path)) / "/abs/elsewhere" == epath("/abs/elsewhere")
    assert q == epath(str(tmp_path / "dir" / "x.txt")) and len({q, epath(str(q))}) == 1
    assert pickle.loads(pickle.dumps(q)) == q
    for i in range(4):
        (tmp_path / "dir" / f"g_{i}.bin").write_bytes(b"g")
    globbed = sorted(str(x) for x in epath(str(tmp_path)).glob("dir/g_[0-2].bin"))
    assert globbed == [str(tmp_path / "dir" / f"g_{i}.bin") for i in range(3)]
    walked = sorted(x.relative_to(epath(str(tmp_path))) for x in epath(str(tmp_path)).walk())
    assert walked == ["dir/g_0.bin", "dir/g_1.bin", "dir/g_2.bin", "dir/g_3.bin", "dir/x.txt",
                      "file.bin"]  # fmt: skip
    (tmp_path / "link").symlink_to(tmp_path / "dir", target_is_directory=True)
    linked = sorted(str(x) for x in epath(str(tmp_path)).glob("**/*.txt"))
    assert linked == [str(tmp_path / "dir" / "x.txt"), str(tmp_path / "link" / "x.txt")]
    assert [x.name for x in epath(str(tmp_path)).glob("link/*.txt")] == ["x.txt"]
    stat = q.stat()
    assert (stat.content_length, stat.type) == (len("héllo".encode()), "file")
    copy = epath(str(tmp_path / "copy.txt"))
    q.copy(copy)
    assert copy.read_text() == "héllo"
    copy.unlink()
    assert not copy.is_file()
    local = epath(f"msc://{DEFAULT_PROFILE_NAME}{tmp_path}/file.bin")
    assert local.is_file() and local.read_bytes() == b"dummycontent"


def test_default_profile_name_is_energons() -> None:
    assert (
        _mirror("epathlib", "DEFAULT_PROFILE_NAME")[0]
        == _mirror("epathlib", "DEFAULT_PROFILE_NAME")[1]
    )


def test_epath_refuses_what_it_cannot_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NVDATASET_CACHE_DIR", raising=False)
    with pytest.raises(ConfigError, match="dss:// paths are read from the local dataset cache"):
        EPath("dss://charts@v0/x")  # no cache to read it from
    with pytest.raises(ValueError, match="above root"):
        EPath("/../..") / "x"


def test_epath_opens_datasets(train_ds: Path) -> None:
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    options = dict(batch_size=4, shuffle_buffer_size=None, max_samples_per_sequence=None)
    by_path = next(
        iter(get_savable_loader(get_train_dataset(train_ds, worker_config=wc, **options)))
    )
    by_epath = next(
        iter(get_savable_loader(get_train_dataset(EPath(train_ds), worker_config=wc, **options)))
    )
    assert by_path.__key__ == by_epath.__key__


# --- EPath on S3 (moto's server on the loopback) ---------------------------------------------


@pytest.fixture(scope="module")
def s3() -> Any:
    pytest.importorskip("moto")
    pytest.importorskip("s3fs")
    from energon_lite.synth.servers import S3Server

    with S3Server() as server:
        yield server


@pytest.fixture
def aws_env(s3: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from energon_lite.synth.servers import TEST_CREDENTIALS

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", TEST_CREDENTIALS["key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", TEST_CREDENTIALS["secret"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("ENERGON_LITE_CACHE_DIR", str(tmp_path / "cache"))


def test_epath_on_s3(s3: Any, aws_env: None, tmp_path: Path) -> None:
    s3.client().create_bucket(Bucket="epath")
    root = EPath("s3://epath/test/dir")
    f = root / "sub" / ".." / "file.txt"
    assert str(f) == "s3://epath/test/dir/file.txt" and f.url == str(f)
    assert not f.is_file()
    with f.open("w") as out:
        out.write("remote text")
    assert f.is_file() and f.read_text() == "remote text" and f.size() == 11
    assert f.stat().content_length == 11 and f.stat().last_modified is not None
    (root / "subdir" / "file2.txt").write_bytes(b"two")
    (root / "subdir" / "file3.blob").write_bytes(b"three")
    assert root.is_dir() and (root / "subdir").is_dir() and not f.is_dir()
    walked = sorted(str(p) for p in root.walk())
    assert walked == [f"s3://epath/test/dir/{n}" for n in ("file.txt", "subdir/file2.txt",
                                                              "subdir/file3.blob")]  # fmt: skip
    assert [str(p) for p in root.glob("**/*.txt")] == [
        "s3://epath/test/dir/file.txt", "s3://epath/test/dir/subdir/file2.txt"
    ]  # fmt: skip
    assert [p.name for p in root.glob("subdir/*.blob")] == ["file3.blob"]
    local = EPath(tmp_path / "down.txt")
    f.copy(local)
    assert local.read_text() == "remote text"
    up = root / "up.txt"
    local.copy(up)
    assert up.read_bytes() == b"remote text" and up.relative_to(root) == "up.txt"
    up.unlink()
    assert not up.is_file()
    with pytest.raises(FileNotFoundError):
        (root / "missing").read_bytes()


def test_epath_opens_an_s3_dataset(s3: Any, aws_env: None, train_ds: Path) -> None:
    s3.upload(train_ds, "epathds", "ds")
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    options = dict(batch_size=4, shuffle_buffer_size=None, max_samples_per_sequence=None)
    local = next(iter(get_savable_loader(get_train_dataset(train_ds, worker_config=wc, **options))))
    path = EPath("s3://epathds/ds")
    assert (path / ".nv-meta" / "split.yaml").is_file()
    remote = next(iter(get_savable_loader(get_train_dataset(path, worker_config=wc, **options))))
    assert remote.__key__ == local.__key__


# --- dataset_config and WebdatasetMeta ------------------------------------------------------


def test_get_dataset_from_config_builds_the_folder(split_ds: Path) -> None:
    from energon_lite.dataset_config import get_dataset_from_config

    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    factory = get_dataset_from_config(
        EPath(split_ds), split_part="val", training=False, worker_config=wc
    )
    assert isinstance(factory, el.StandardWebdatasetFactory)
    keys = [s.__key__ for s in get_savable_loader(factory.build())]
    expected = [
        s.__key__
        for s in get_savable_loader(el.get_val_dataset(split_ds, worker_config=wc, batch_size=None))
    ]
    assert keys == expected and len(keys) == 20
    with pytest.raises(ConfigError, match="TextSample"):
        get_dataset_from_config(split_ds, worker_config=wc, sample_type=el.TextSample)
    with pytest.raises(DatasetFormatError, match="prepare"):
        get_dataset_from_config(split_ds / "parts", worker_config=wc)


def test_load_config(tmp_path: Path) -> None:
    from energon_lite.dataset_config import load_config

    (tmp_path / "c.yaml").write_text(
        "__module__: megatron.energon\n__class__: TextSample\ntext: hi\n__key__: k\n"
    )
    sample = load_config(EPath(tmp_path / "c.yaml"), default_type=el.CaptioningSample,
                         default_kwargs={"__restore_key__": ()})  # fmt: skip
    assert isinstance(sample, el.TextSample) and (sample.text, sample.__key__) == ("hi", "k")
    made = load_config({"text": "x"}, default_type=el.TextSample,
                       default_kwargs={"__key__": "a", "__restore_key__": ()})  # fmt: skip
    assert made.text == "x"
    with pytest.raises(DatasetFormatError, match="os"):
        load_config({"__module__": "os", "__class__": "system"}, default_type=el.TextSample)


def test_webdataset_meta_matches_energons(split_ds: Path) -> None:
    ours_type, theirs_type = _mirror("flavors.webdataset", "WebdatasetMeta")
    from megatron.energon.epathlib import EPath as TheirPath

    ours = ours_type.from_config(EPath(split_ds), split_part="train")
    theirs = theirs_type.from_config(TheirPath(str(split_ds)), split_part="train")
    assert [(s.name, str(s.path), s.count) for s in ours.shards] == [
        (s.name, str(s.path), s.count) for s in theirs.shards
    ]
    assert ours.split_part_files == theirs.split_part_files
    assert ours.info_shard_files == theirs.info_shard_files
    assert ours.sample_excludes == theirs.sample_excludes


def test_empty_split_part_is_an_empty_dataset_error(tmp_path: Path, split_ds: Path) -> None:
    import shutil

    from energon_lite.flavors.webdataset import EmptyDatasetError, WebdatasetMeta

    copy = tmp_path / "ds"
    shutil.copytree(split_ds / ".nv-meta", copy / ".nv-meta")
    (copy / ".nv-meta" / "split.yaml").write_text("split_parts:\n  train: []\n")
    with pytest.raises(EmptyDatasetError, match="train"):
        WebdatasetMeta.from_config(copy, split_part="train")


def test_epath_on_an_msc_profile(
    s3: Any, aws_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``msc://profile/...`` through the MSC config file, as Energon's EPath reads it."""
    from energon_lite.synth.servers import write_msc_config

    s3.client().create_bucket(Bucket="mscbucket")
    config = write_msc_config(tmp_path / "msc.yaml", "loop", s3.endpoint, "mscbucket/root")
    monkeypatch.setenv("MSC_CONFIG", str(config))
    p = EPath("msc://loop/test/dir/../file.txt")
    assert str(p) == "msc://loop/test/file.txt"
    p.write_text("via msc")
    assert p.is_file() and p.read_text() == "via msc"
    assert EPath("s3://mscbucket/root/test/file.txt").read_text() == "via msc"
    assert [x.name for x in EPath("msc://loop/test").glob("*.txt")] == ["file.txt"]
