"""Metadataset YAML through the loader: blends, quotas, subsets, subflavors, crude, resume, errors."""

from __future__ import annotations

import re
import shutil
import tracemalloc
from collections import Counter
from pathlib import Path

import pytest

from energon_lite import (
    ConfigError,
    Cooker,
    DatasetFormatError,
    DefaultTaskEncoder,
    ImageSample,
    TextSample,
    WorkerConfig,
    basic_sample_keys,
    get_savable_loader,
    get_train_dataset,
    get_val_dataset,
    prepare_dataset,
)
from energon_lite.metadataset.parse import load_metadataset, split_names
from energon_lite.synth.shards import write_captioning_shards
from energon_lite.testing import assert_loader_resumes

REPO = Path(__file__).resolve().parent.parent
HEAD = "__module__: megatron.energon\n__class__: MetadatasetV2\n"


def _dataset(root: Path, name: str, count: int, ratio: list, crude: bool = False) -> None:
    write_captioning_shards(root / name, count, 10, image_size=(8, 8), key_format=name + "-{:04d}")
    prepare_dataset(
        root / name,
        split_ratio=ratio,
        sample_type="CrudeWebdataset" if crude else "CaptioningSample",
        field_map=None if crude else {"image": "jpg", "caption": "txt"},
        progress=False,
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """a: 60 train + 20 val; b: 20 train + 20 val; crude c, d: 20 train; e: empty val."""
    root = tmp_path_factory.mktemp("mds")
    _dataset(root, "a", 80, [("train", 3), ("val", 1)])
    _dataset(root, "b", 40, [("train", 1), ("val", 1)])
    _dataset(root, "c", 20, [("train", 1)], crude=True)
    _dataset(root, "d", 20, [("train", 1)], crude=True)
    _dataset(root, "e", 20, [("train", 1), ("val", 0)])
    return root


def _yaml(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(HEAD + body)
    return path


def _loader(path: Path, workers: int = 0, **kwargs):
    kwargs = {
        "batch_size": None,
        "shuffle_buffer_size": None,
        "max_samples_per_sequence": 5,
        **kwargs,
    }
    dataset = get_train_dataset(path, worker_config=WorkerConfig(0, 1, workers), **kwargs)
    return get_savable_loader(dataset)


BLEND_3_1 = (
    "splits:\n  train:\n    blend:\n      - {weight: 3, path: a}\n      - {weight: 1, path: b}\n"
)
EPOCHIZED = (
    "splits:\n  train:\n    blend_epochized:\n      - {repetitions: 2, path: a}\n"
    "      - {repetitions: 0.5, path: b}\n"
)


def test_blend_frequencies_match_weights(data):
    # a ~ Binomial(4000, 3/4): sd = 27.4; a 4-sd band (+-110) is a 6e-5 false-alarm rate
    loader = _loader(_yaml(data, "blend31.yaml", BLEND_3_1))
    counts = Counter(s.__key__[0] for _, s in zip(range(4000), loader))
    assert abs(counts["a"] - 3000) <= 110, counts


@pytest.mark.parametrize("workers", [0, 2])
def test_blend_epochized_gives_exact_quotas_per_epoch(data, workers):
    loader = _loader(_yaml(data, "epochized.yaml", EPOCHIZED), workers, repeat=False)
    for _ in range(2):  # two epochs: the loader ends each one
        keys = [s.__key__ for s in loader]
        assert len(keys) == 2 * 60 + 10
        per_key = Counter(keys)
        assert {k for k in per_key if k[0] == "a"} == {f"a-{i:04d}" for i in range(60)}
        assert all(per_key[k] == 2 for k in per_key if k[0] == "a")
        assert sum(1 for k in per_key if k[0] == "b") == 10 and len(per_key) == 70


@pytest.mark.parametrize("workers", [0, 2])
def test_single_epochized_dataset_repeats_its_quota(data, workers):
    path = _yaml(
        data,
        "twice.yaml",
        "splits:\n  train:\n    blend_epochized:\n      - {repetitions: 2.5, path: b}\n",
    )
    keys = Counter(s.__key__ for s in _loader(path, workers, repeat=False))
    assert sum(keys.values()) == 50 and sorted(set(keys.values())) == [2, 3]


def test_subsets_compose_and_subflavors_override(data):
    _yaml(
        data,
        "inner.yaml",
        "splits:\n  train:\n    blend:\n"
        "      - {weight: 1, path: a, subset: {range: [0%, 50%]}, subflavors: {level: inner, x: 1}}\n"
        "      - {weight: 1, path: b, subset: {range: [5, end]}}\n",
    )
    outer = _yaml(
        data,
        "outer.yaml",
        "splits:\n  train:\n    path: inner.yaml\n    subset: {range: [50%, 100%]}\n"
        "    subflavors: {level: outer, src: outer}\n",
    )
    leaves, mode = load_metadataset(outer, "train")
    assert mode == "weights" and [leaf.subset for leaf in leaves] == [(15, 30), (12, 20)]
    samples = [s for _, s in zip(range(300), _loader(outer))]
    assert {s.__key__ for s in samples} == {f"a-{i:04d}" for i in range(15, 30)} | {
        f"b-{i:04d}" for i in range(12, 20)
    }
    flavors = {s.__key__[0]: s.__subflavors__ for s in samples}
    assert flavors == {
        "a": {"level": "outer", "x": 1, "src": "outer"},
        "b": {"level": "outer", "src": "outer"},
    }


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_through_a_blend_mid_epoch_and_at_the_boundary(data, workers):
    path = _yaml(data, "epochized_repeat.yaml", EPOCHIZED)
    # 130 samples per epoch in batches of 5: the epoch boundary falls near batch 26
    assert_loader_resumes(
        lambda: _loader(path, workers, batch_size=5, shuffle_buffer_size=8), 34, [0, 9, 26, 27]
    )
    weighted = _yaml(data, "blend31.yaml", BLEND_3_1)
    assert_loader_resumes(lambda: _loader(weighted, workers, batch_size=4), 20, [0, 7, 13])


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_after_a_finished_epoch_continues_with_the_next(data, workers):
    path = _yaml(data, "epochized.yaml", EPOCHIZED)
    loader = _loader(path, workers, repeat=False)
    first = [s.__key__ for s in loader]
    state = loader.save_state_rank()
    second = [s.__key__ for s in loader]
    resumed = _loader(path, workers, repeat=False)
    resumed.restore_state_rank(state)
    assert [s.__key__ for s in resumed] == second and len(second) == 130 and second != first


class CookBoth(DefaultTaskEncoder):
    cookers = [
        Cooker(lambda s: TextSample(**basic_sample_keys(s), text=s["txt"]), {"kind": "text"}),
        Cooker(lambda s: ImageSample(**basic_sample_keys(s), image=s["jpg"]), {"kind": "image"}),
    ]


def test_blend_of_crude_datasets_is_cooked_by_subflavor(data):
    path = _yaml(
        data,
        "crude.yaml",
        "splits:\n  train:\n    blend:\n      - {weight: 1, path: c, subflavors: {kind: text}}\n"
        "      - {weight: 1, path: d, subflavors: {kind: image}}\n",
    )
    samples = [s for _, s in zip(range(60), _loader(path, task_encoder=CookBoth()))]
    kinds = {type(s).__name__ + ":" + s.__key__[0] for s in samples}
    assert kinds == {"TextSample:c", "ImageSample:d"}
    assert all(s.text.startswith("sample ") for s in samples if isinstance(s, TextSample))
    unmatched = _yaml(
        data, "unmatched.yaml", "splits:\n  train:\n    path: c\n    subflavors: {kind: audio}\n"
    )
    with pytest.raises(
        ConfigError, match=re.escape("subflavors {'kind': 'audio'}: no cooker matches")
    ):
        next(iter(_loader(unmatched, task_encoder=CookBoth())))  # at once, not after 100 skips


def test_val_concatenates_in_order(data):
    path = _yaml(
        data,
        "val.yaml",
        "splits:\n  val:\n    blend:\n      - {weight: 1, path: b}\n      - {weight: 9, path: a}\n",
    )
    dataset = get_val_dataset(path, worker_config=WorkerConfig(0, 1, 0), batch_size=None)
    keys = [s.__key__ for s in get_savable_loader(dataset)]
    assert keys == [f"b-{i:04d}" for i in range(20, 40)] + [f"a-{i:04d}" for i in range(60, 80)]


@pytest.mark.usefixtures("collector_spared")  # Energon collects garbage
def test_energon_metadataset_loads_unchanged_here_and_in_energon(data):
    path = _yaml(data, "epochized.yaml", EPOCHIZED)
    assert len([s for s in _loader(path, repeat=False)]) == 130
    energon = pytest.importorskip("megatron.energon")
    dataset = energon.get_train_dataset(
        str(path),
        worker_config=energon.WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=5,
        repeat=False,
    )
    keys = [s.__key__ for s in energon.get_loader(dataset)]
    assert Counter(k[0] for k in keys) == {"a": 120, "b": 10}


def test_worked_examples_load(tmp_path):
    work = tmp_path / "metadatasets"
    shutil.copytree(REPO / "metadatasets", work, ignore=shutil.ignore_patterns("data"))
    for name in ("coco", "coyo", "laion", "ocr"):
        _dataset(work / "data", name, 40, [("train", 3), ("val", 1)], crude=name == "ocr")
    leaves, mode = load_metadataset(work / "nested_blend.yaml", "train")
    assert mode == "weights"
    weights = {leaf.path.name: round(leaf.weight, 6) for leaf in leaves}
    assert weights == {"coco": 0.375, "coyo": 0.225, "laion": 0.15, "ocr": 0.25}
    assert (
        leaves[0].subflavors == {"task": "caption"}
        and leaves[3].shuffle_over_epochs_multiplier == 2
    )
    # the loader argument is the outermost multiplier: it composes with each entry's own
    outer, _ = load_metadataset(work / "nested_blend.yaml", "train", 3)
    assert [leaf.shuffle_over_epochs_multiplier for leaf in outer] == [
        3 * (leaf.shuffle_over_epochs_multiplier or 0) or None for leaf in leaves
    ]
    unshuffled, _ = load_metadataset(work / "nested_blend.yaml", "train", None)
    assert {leaf.shuffle_over_epochs_multiplier for leaf in unshuffled} == {None}
    leaves, mode = load_metadataset(work / "curriculum_epochized.yaml", "train")
    assert mode == "epochized" and [leaf.repetitions for leaf in leaves] == [2, 0.5, 1]


def _entry(extra: str) -> str:
    return f"splits:\n  train:\n    blend:\n      - {{weight: 1, path: a}}\n      - {extra}\n"


BAD = {
    "syntax": ("splits:\n  train: [\n", ["bad.yaml:5", "YAML syntax error"]),
    "unknown key": (
        _entry("{weight: 1, path: b, wieght: 2}"),
        ["splits.train.blend[1].wieght", "unknown key", "allowed"],
    ),
    "negative weight": (
        _entry("{weight: -1, path: b}"),
        ["splits.train.blend[1].weight", "-1", "> 0"],
    ),
    "both": (
        _entry("{weight: 1, repetitions: 2, path: b}"),
        ["blend[1].repetitions", "both weight and repetitions"],
    ),
    "repetitions in blend": (
        _entry("{repetitions: 2, path: b}"),
        ["blend[1].repetitions", "never both"],
    ),
    "mixed tree": (
        _entry("{weight: 1, path: epochized.yaml}"),
        ["blend[1].path", "epochized blend inside a blend"],
    ),
    "missing path": (
        _entry("{weight: 1, path: nowhere}"),
        ["blend[1].path", "nowhere does not exist"],
    ),
    "cycle": (
        _entry("{weight: 1, path: bad.yaml}"),
        ["blend[1].path", "cycle of nested metadatasets"],
    ),
    "empty blend": ("splits:\n  train:\n    blend: []\n", ["splits.train.blend", "is empty"]),
    "empty split": (
        "splits:\n  train:\n    path: e\n    split_part: val\n",
        ["splits.train.split_part", "'val'", "is empty"],
    ),
    "unknown split_part": (
        _entry("{weight: 1, path: b, split_part: nope}"),
        ["blend[1].split_part", "no split 'nope'", "train"],
    ),
    "unknown split": ("splits:\n  val:\n    path: a\n", ["splits", "no split 'train'", "['val']"]),
    "jsonl": (_entry("{weight: 1, path: x.jsonl}"), ["blend[1].path", "x.jsonl does not exist"]),
    "aux": (
        _entry("{weight: 1, path: b, aux: {m: 'ftp://x/y'}}"),
        ["blend[1].aux.m", "'ftp://x/y': unknown scheme"],
    ),
    "class": ("splits:\n  train:\n    path: a\n", ["Metadataset", "datasets", "MetadatasetV2"]),
    "subset": (
        _entry("{weight: 1, path: b, subset: {range: [0%, 150%]}}"),
        ["blend[1].subset.range", "0 <= N <= 100"],
    ),
    "typo and missing weight": (
        _entry("{path: b, wieght: 3}"),
        ["blend[1].wieght", "unknown key 'wieght' (did you mean 'weight'?)"],
    ),
    "typo of blend": (
        "splits:\n  train:\n    blnd:\n      - {weight: 1, path: a}\n",
        ["splits.train.blnd", "(did you mean 'blend'?)"],
    ),
    "infinite weight": (
        _entry("{weight: .inf, path: b}"),
        ["blend[1].weight", "inf; must be a finite"],
    ),
    "nan weight": (_entry("{weight: .nan, path: b}"), ["blend[1].weight", "nan; must be a finite"]),
    "huge int weight": (
        _entry("{weight: " + "9" * 400 + ", path: b}"),
        ["blend[1].weight", "<int of"],
    ),
    "weights sum to inf": (
        _entry("{weight: 1.0e+308, path: b}").replace("weight: 1,", "weight: 1.0e+308,"),
        ["splits.train.blend", "sum to inf"],
    ),
    "weight share underflows": (
        _entry("{weight: 1.0e-320, path: b}").replace("weight: 1,", "weight: 1.0e+300,"),
        ["splits.train.blend[1].weight", "a share of 0"],
    ),
    "repetitions 1e9": (
        "splits:\n  train:\n    blend_epochized:\n      - {repetitions: 1.0e+9, path: a}\n",
        ["blend_epochized[0].repetitions", "1e+09 repetitions per epoch", "more than 1000"],
    ),
    "repetitions multiply past the limit": (
        "splits:\n  train:\n    blend_epochized:\n      - {repetitions: 40, path: reps40.yaml}\n",
        ["blend_epochized[0].repetitions", "1600 repetitions per epoch", "more than 1000"],
    ),
    "repetitions too small for an epoch": (
        "splits:\n  train:\n    blend_epochized:\n      - {repetitions: 1, path: a}\n"
        "      - {repetitions: 0.001, path: b}\n",
        ["blend_epochized", "/b (split 'train') has repetitions 0.001", "no sample per epoch"],
    ),
    "subset typo": (
        _entry("{weight: 1, path: b, subset: {rnage: [0%, 50%]}}"),
        ["blend[1].subset.rnage", "(did you mean 'range'?)"],
    ),
    # Energon refuses an absolute range above a leaf with "... only allowed for a leaf dataset"
    "absolute on yaml": (
        _entry("{weight: 1, path: blend31.yaml, subset: {range: [0, 5]}}"),
        ["blend[1].subset", "[0, 5]", "only allowed for a leaf dataset", "relative range"],
    ),
    "absolute on a blend": (
        "splits:\n  train:\n    subset: {range: [50, 55]}\n    blend_epochized:\n"
        "      - {repetitions: 2, path: a}\n",
        ["splits.train.subset", "[50, 55]", "only allowed for a leaf dataset"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_names_file_key_and_what_is_allowed(data, case):
    _yaml(data, "epochized.yaml", EPOCHIZED)
    _yaml(data, "blend31.yaml", BLEND_3_1)
    _yaml(data, "reps40.yaml", EPOCHIZED.replace("2, path: a", "40, path: a"))
    body, fragments = BAD[case]
    head = HEAD.replace("MetadatasetV2", "Metadataset") if case == "class" else HEAD
    path = data / "bad.yaml"
    path.write_text(head + body)
    with pytest.raises(DatasetFormatError) as error:
        load_metadataset(path, "train")
    assert str(path) in str(error.value)
    for fragment in fragments:
        assert fragment in str(error.value), (fragment, str(error.value))


def test_energon_lite_module_is_accepted(data):
    path = data / "lite.yaml"
    path.write_text(
        "__module__: energon_lite\n__class__: MetadatasetV2\nsplits:\n  train:\n    path: b\n"
    )
    leaves, mode = load_metadataset(path, "train")
    assert mode == "single" and leaves[0].path == data / "b" and leaves[0].weight is None


def _laughs(levels: int = 9) -> str:
    """A billion-laughs chain: 9 anchors of 9 aliases each stand for 9**9 values."""
    lines = ["bomb:", "  - &l0 [ha, ha, ha, ha, ha, ha, ha, ha, ha]"]
    for level in range(1, levels):
        lines.append(f"  - &l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.timeout(60)
def test_yaml_bomb_as_a_weight_fails_fast_with_bounded_memory(data):

    path = data / "bomb.yaml"
    path.write_text(HEAD + _laughs() + _entry("{weight: *l8, path: b}"))
    tracemalloc.start()
    try:
        with pytest.raises(DatasetFormatError) as error:
            load_metadataset(path, "train")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(error.value)
    assert str(path) in message and "aliases expand the document" in message, message
    assert len(message) < 500 and peak < 20e6, (len(message), peak)
    # a few aliases (shared subflavors, as Energon files use them) are still fine
    path.write_text(
        HEAD + "splits:\n  train:\n    blend:\n"
        "      - {weight: 1, path: a, subflavors: &common {source: web}}\n"
        "      - {weight: 1, path: b, subflavors: *common}\n"
    )
    leaves, _ = load_metadataset(path, "train")
    assert [leaf.subflavors for leaf in leaves] == [{"source": "web"}] * 2


def test_a_huge_metadataset_file_is_refused_before_it_is_parsed(data, tmp_path):
    """A 13 MB plain YAML with a million schedule points parsed for minutes at 1.4 GB; a file
    past 1 MiB is refused by its size, naming it, before PyYAML sees it (split_names too),
    and a schedule past 10,000 points is refused naming the entry."""
    points = ", ".join(f"[{at}, 1]" for at in range(1_000_000))
    huge = _yaml(
        tmp_path,
        "huge.yaml",
        "splits:\n  train:\n    blend:\n"
        f"      - {{path: {data / 'a'}, weight: {{schedule: [{points}]}}}}\n",
    )
    tracemalloc.start()
    try:
        for load in (lambda: load_metadataset(huge, "train"), lambda: split_names(huge)):
            with pytest.raises(DatasetFormatError, match=r"huge\.yaml: .* at most 1,048,576"):
                load()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100e6, peak  # the text itself, not a parse tree
    many = ", ".join(f"[{at}, 1]" for at in range(10_001))
    path = _yaml(
        tmp_path,
        "many.yaml",
        "splits:\n  train:\n    blend:\n"
        f"      - {{path: {data / 'a'}, weight: {{schedule: [{many}]}}}}\n"
        f"      - {{path: {data / 'b'}, weight: 1}}\n",
    )
    with pytest.raises(DatasetFormatError, match=r"blend\[0\]\.weight: 10,001 points"):
        load_metadataset(path, "train")


def test_deep_nesting_is_our_error_not_recursion(data, tmp_path):
    chain = tmp_path / "chain"
    chain.mkdir()
    (chain / "a").symlink_to(data / "a")
    for index in range(2000):  # 2,000 metadataset files, each naming the next
        target = f"n{index + 1}.yaml" if index < 1999 else "a"
        (chain / f"n{index}.yaml").write_text(HEAD + f"splits:\n  train:\n    path: {target}\n")
    with pytest.raises(DatasetFormatError, match=r"nested more than 32 files deep"):
        load_metadataset(chain / "n0.yaml", "train")
    deep = tmp_path / "deep.yaml"  # and YAML nested 5,000 levels in one file
    deep.write_text(HEAD + "splits: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(DatasetFormatError, match=r"deep.yaml:3:.*nested deeper than 64 levels"):
        load_metadataset(deep, "train")


def test_a_slice_read_twice_in_an_epoch_resumes(data):
    """With shuffle_over_epochs_multiplier > 1 an epoch may read a slice twice, so the same
    sample (same restore key) can sit in the shuffle buffer twice: such a state is valid."""
    path = _yaml(
        data,
        "multiplied.yaml",
        "splits:\n  train:\n    blend:\n"
        "      - {weight: 1, path: a, shuffle_over_epochs_multiplier: 3}\n",
    )

    def make():
        return _loader(path, shuffle_buffer_size=8, parallel_shard_iters=2)

    loader, point = make(), None
    for step, _ in enumerate(loader):
        level = loader.save_state_rank()["workers"][0]
        while level["type"] != "ShuffleBuffer":
            level = level["source"]
        keys = level["keys"]
        if len(keys) != len({repr(k) for k in keys}):
            point = step + 1  # batches delivered when this state was saved
            break
        assert step < 2000, "no duplicate within 2,000 samples: the test data changed"
    assert point is not None
    assert_loader_resumes(make, point + 10, [point])
