"""``join:`` in a metadataset: samples of prepared datasets matched by key, nonmatch rules, resume."""

from __future__ import annotations

import io
import random
import tarfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from energon_lite import (
    ConfigError,
    DatasetFormatError,
    Sample,
    TextSample,
    WorkerConfig,
    allow_sample_type_modules,
    get_loader,
    get_savable_loader,
    get_train_dataset,
    prepare_dataset,
    prepare_metadataset,
)
from energon_lite.testing import assert_loader_resumes

# the join specs below name joiners of this test module: trusted like a user's own code
allow_sample_type_modules(__name__)

HEAD = "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"


@dataclass
class Joined(Sample):
    text1: str = ""
    text2: str | None = None

    @staticmethod
    def from_joined(first: TextSample, second: TextSample | None) -> Joined:
        return Joined.derive_from(
            first, text1=first.text, text2=None if second is None else second.text
        )


class Merged(TextSample):
    """A joiner class with no from_joined of its own: Energon's default joins the fields."""


def joiner(text1: TextSample, text2: TextSample | None) -> Joined:
    return Joined.derive_from(text1, text1=f"j{text1.text}", text2=text2 and f"j{text2.text}")


def _text_dataset(root: Path, keys: list[int], text: str, per_shard: int = 10) -> Path:
    (root / "parts").mkdir(parents=True)
    for shard, start in enumerate(range(0, len(keys), per_shard)):
        with tarfile.open(root / f"parts/data-{shard}.tar", "w") as tar:
            for key in keys[start : start + per_shard]:
                data = text.format(key).encode()
                info = tarfile.TarInfo(f"{key:06d}.txt")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    prepare_dataset(
        root, split_ratio=[("train", 1)], sample_type="TextSample", field_map={"text": "txt"},
        progress=False,
    )  # fmt: skip
    return root


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("join")
    _text_dataset(root / "ds1", list(range(55)), "{}")
    shuffled = list(range(55))
    random.Random(1).shuffle(shuffled)
    _text_dataset(root / "ds1b", shuffled, "B{}", per_shard=7)  # same keys, other shards
    _text_dataset(root / "half", sorted(shuffled[:28]), "{}", per_shard=9)
    for name, body in {
        "inner.yaml": "    join:\n      first: {path: ds1, subflavors: {a: 1}}\n"
        "      second: {path: ds1b}\n"
        f"    joiner: {{__module__: {__name__}, __class__: Joined}}\n",
        "skip.yaml": "    join:\n      text1: {path: ds1}\n      text2: {path: half, nonmatch: skip}\n"
        f"    joiner: {{__module__: {__name__}, __function__: joiner}}\n",
        "none.yaml": "    join:\n      - {path: ds1}\n      - {path: half, nonmatch: none}\n"
        f"    joiner: {{__module__: {__name__}, __function__: joiner}}\n",
        "error.yaml": "    join:\n      - {path: ds1}\n      - {path: half}\n"
        f"    joiner: {{__module__: {__name__}, __function__: joiner}}\n",
        "default.yaml": "    join:\n      - {path: ds1}\n      - {path: ds1b}\n"
        f"    joiner: {{__module__: {__name__}, __class__: Merged}}\n",
        "blend.yaml": "    blend:\n      - weight: 1\n        path: half\n"
        "      - weight: 1\n        join:\n          - {path: ds1}\n          - {path: ds1b}\n"
        f"        joiner: {{__module__: {__name__}, __class__: Joined}}\n",
    }.items():
        (root / name).write_text(HEAD + body)
        if name != "error.yaml":  # its preparation fails (below)
            prepare_metadataset(root / name)
    return root


def _train(path: Path, workers: int = 0, **kwargs):
    return get_train_dataset(
        path,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=workers, seed_offset=42),
        batch_size=kwargs.pop("batch_size", 1),
        shuffle_buffer_size=None,
        max_samples_per_sequence=kwargs.pop("max_samples_per_sequence", None),
        **kwargs,
    )


def test_inner_join_every_sample_has_its_partner(data: Path) -> None:
    dataset = _train(data / "inner.yaml")
    assert len(dataset) == 55
    batches = [b for _, b in zip(range(110), get_loader(dataset))]
    pairs = [(b.text1[0], b.text2[0], b.__key__[0]) for b in batches]
    assert all(t2 == f"B{t1}" and key == f"{int(t1):06d}" for t1, t2, key in pairs)
    assert Counter(t1 for t1, _, _ in pairs) == {str(i): 2 for i in range(55)}
    assert batches[0].__subflavors__ == [{"a": 1}]
    sources = batches[0].__sources__
    assert {Path(s.dataset_path).name for s in sources} == {"ds1", "ds1b"}
    assert (data / "inner.yaml.cache").is_dir()  # the join index, written beside the file
    from energon_lite.flavors.join import JoinedSource
    from energon_lite.sources.base import Source

    (spec,) = (data / "inner.yaml.cache").glob("*.join.json")
    source = JoinedSource(spec)
    assert isinstance(source, Source) and len(source) == 55
    key, parts = source.read(0, 3)
    (first, second) = parts["__join__"]
    assert first[0] == second[0] == key == "000003" and second[1]["txt"] == b"B3"


def test_a_sample_class_joins_by_the_default_from_joined(data: Path) -> None:
    batches = [b for _, b in zip(range(55), get_loader(_train(data / "default.yaml")))]
    # the primary's key, the partner's text over the primary's, both datasets' files
    assert all(b.text[0] == f"B{int(b.__key__[0])}" for b in batches)
    assert Counter(b.__key__[0] for b in batches) == {f"{i:06d}": 1 for i in range(55)}
    names = [Path(s.dataset_path).name for s in batches[0].__sources__]
    assert names == ["ds1", "ds1b"]


def test_nonmatch_skip_none_and_error(data: Path) -> None:
    half = {int(line) for line in _texts(data / "half")}
    skipped = list(get_loader(_train(data / "skip.yaml", repeat=False)))
    assert sorted(int(b.text1[0][1:]) for b in skipped) == sorted(half)
    assert all(b.text2[0] == b.text1[0] for b in skipped)
    kept = list(get_loader(_train(data / "none.yaml", repeat=False)))
    assert len(kept) == 55
    for batch in kept:
        number = int(batch.text1[0][1:])
        assert batch.text2[0] == (f"j{number}" if number in half else None)
    for step in (prepare_metadataset, _train):  # preparing it fails, and so does loading
        with pytest.raises(
            DatasetFormatError, match=r"27 samples of .*ds1 have no partner in .*half, e.g. key"
        ):
            step(data / "error.yaml")


def _texts(root: Path) -> list[str]:
    out = []
    for tar_path in sorted((root / "parts").glob("*.tar")):
        with tarfile.open(tar_path) as tar:
            out += [tar.extractfile(m).read().decode() for m in tar.getmembers()]
    return out


def test_join_inside_a_blend_and_the_index_is_built_once(data: Path) -> None:
    batches = [b for _, b in zip(range(80), get_loader(_train(data / "blend.yaml")))]
    joined = [b for b in batches if hasattr(b, "text1")]
    plain = [b for b in batches if not hasattr(b, "text1")]
    assert joined and plain
    indexes = sorted((data / "blend.yaml.cache").glob("index/*.npy"))
    assert indexes
    before = [p.stat().st_mtime_ns for p in indexes]
    _train(data / "blend.yaml")
    assert [p.stat().st_mtime_ns for p in indexes] == before


@pytest.mark.parametrize("workers", [0, 2])
def test_exact_resume_through_a_join(data: Path, workers: int) -> None:
    assert_loader_resumes(
        lambda: get_savable_loader(
            _train(data / "inner.yaml", workers, batch_size=3, max_samples_per_sequence=4)
        ),
        total=24,
        save_points=[0, 1, 7, 15],
    )


def test_bad_join_is_named(data: Path) -> None:
    (data / "bad.yaml").write_text(
        HEAD + "    join:\n      - {path: ds1}\n      - {path: ds1b, nonmatch: maybe}\n"
        f"    joiner: {{__module__: {__name__}, __function__: joiner}}\n"
    )
    with pytest.raises(DatasetFormatError, match=r"splits.train.join\[1\].nonmatch: 'maybe'"):
        _train(data / "bad.yaml")
    (data / "bad2.yaml").write_text(HEAD + "    join:\n      - {path: ds1}\n      - {path: ds1b}\n")
    with pytest.raises(DatasetFormatError, match=r"splits\.train\.joiner"):
        _train(data / "bad2.yaml")


def test_joiner_from_an_importable_module_is_imported_as_in_energon(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Energon imports the joiner a metadataset names from any importable module (its own
    tests name a function of the test module); so does energon_lite, without
    allow_sample_type_modules. A spec file in the cache folder imports only the joiner the
    metadataset named for it: a spec planted or edited there, or opened on its own, is refused."""
    (tmp_path / "my_joiners.py").write_text(
        "def pair(a, b):\n    return a.derive_from(a, text=a.text + '+' + b.text)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yaml_path = data / "importable.yaml"
    yaml_path.write_text(
        HEAD + "    join:\n      - {path: ds1}\n      - {path: ds1b}\n"
        "    joiner: {__module__: my_joiners, __function__: pair}\n"
    )
    prepare_metadataset(yaml_path)
    texts = {b.text[0] for _, b in zip(range(55), get_loader(_train(yaml_path)))}
    assert texts == {f"{i}+B{i}" for i in range(55)}

    # the spec file written into the cache folder names that joiner; rewritten to name
    # another module's function, it imports nothing
    (spec,) = (data / "importable.yaml.cache").glob("join-*.join.json")
    planted = spec.read_text().replace('"my_joiners"', '"os"').replace('"pair"', '"system"')
    spec.write_text(planted)
    with pytest.raises(DatasetFormatError, match=r"the joiner from module 'os' refused"):
        _train(spec)
    # opened directly, a spec the metadataset did not name for it is refused the same way
    other = spec.with_name("join-0000000000000000.join.json")
    other.write_text(planted)
    with pytest.raises(DatasetFormatError, match=r"the joiner from module 'os' refused"):
        _train(other)


def test_joiner_module_that_cannot_be_imported_is_named(data: Path) -> None:
    """As in Energon, checking a metadataset imports no joiner; loading it names the module."""
    (data / "missing_joiner.yaml").write_text(
        HEAD + "    join:\n      - {path: ds1}\n      - {path: ds1b}\n"
        "    joiner: {__module__: no_such_joiner_module, __function__: pair}\n"
    )
    prepare_metadataset(data / "missing_joiner.yaml")
    with pytest.raises(
        DatasetFormatError,
        match=r"missing_joiner.yaml.cache/join-[0-9a-f]+.join.json: cannot import the joiner "
        r".*no_such_joiner_module",
    ):
        _train(data / "missing_joiner.yaml")


def test_a_join_loads_only_once_prepared_and_again_after_an_edit(
    data: Path, tmp_path: Path
) -> None:
    """Energon's point of failure: a join's match index is made by ``prepare_metadataset``;
    loading a join never prepared, or edited since, fails at ``get_train_dataset`` until
    it runs again, which leaves one spec and one index per join (before: built on first
    use, so the edited join loaded, and stale indexes stayed)."""
    for name in ("ds1", "ds1b", "half"):
        (tmp_path / name).symlink_to(data / name)
    one = (
        "      - weight: 1\n        join:\n          - {path: ds1}\n"
        "          - {path: ds1b, nonmatch: skip}\n"
        f"        joiner: {{__module__: {__name__}, __function__: joiner}}\n"
    )
    two = one.replace("ds1b", "half")
    yaml_path = tmp_path / "left_join.yaml"
    yaml_path.write_text(HEAD + "    blend:\n" + one)
    with pytest.raises(ConfigError, match=r"left_join.yaml: the join of .* is not prepared"):
        _train(yaml_path)
    prepare_metadataset(yaml_path)
    assert len(_train(yaml_path)) == 55
    yaml_path.write_text(HEAD + "    blend:\n" + one.replace("{path: ds1}", "{path: half}") + two)
    with pytest.raises(ConfigError, match=r"run prepare_metadataset\(.*left_join.yaml'\)"):
        _train(yaml_path)
    from energon_lite.cli import main

    assert main(["prepare", str(yaml_path)]) == 0  # energon-lite prepare <metadataset>.yaml
    assert len(_train(yaml_path)) == 28 + 28
    cache = tmp_path / "left_join.yaml.cache"
    assert len([p for p in cache.iterdir() if p.is_file()]) == 2  # a spec per join
    assert len(list((cache / "index").iterdir())) == 2  # an index per join
