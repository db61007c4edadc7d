"""Data mixtures: weight schedules, batch composition, token weights and the mix delivered,
through real metadataset YAML files over real prepared tar datasets and real loaders."""

from __future__ import annotations

import io
import math
import tarfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

import energon_lite as el
from energon_lite import prepare_dataset
from energon_lite.cli.bench import run_bench, windowed_shares
from energon_lite.errors import ConfigError, DatasetFormatError
from energon_lite.loader.stats_report import format_stats
from energon_lite.metadataset.schedule import WeightSchedule
from energon_lite.rng import rng_for
from energon_lite.stages.blend_epochized import EpochizedBlend
from energon_lite.stages.mix import deficit_choice, largest_remainder
from energon_lite.synth.shards import write_captioning_shards
from energon_lite.task_encoder.packing import best_fit
from energon_lite.testing import assert_loader_resumes, take

RAMP = "{schedule: [[0, 9], [20, 9], [60, 1]], interpolate: linear}"
RAMP_BACK = "{schedule: [[0, 1], [20, 1], [60, 9]], interpolate: linear}"


def _captions(root: Path, name: str, count: int) -> Path:
    write_captioning_shards(root / name, count, 10, image_size=(8, 8), key_format=name + "{:04d}")
    prepare_dataset(
        root / name,
        split_ratio=[("train", 1)],
        sample_type="CaptioningSample",
        field_map={"image": "jpg", "caption": "txt"},
        progress=False,
    )
    return root / name


def _texts(root: Path, name: str, lengths: list[int]) -> Path:
    """A text dataset whose sample i is ``lengths[i]`` one-letter words (its tokens)."""
    (root / name).mkdir(parents=True)
    for shard, start in enumerate(range(0, len(lengths), 100)):
        with tarfile.open(root / name / f"t-{shard}.tar", "w", format=tarfile.GNU_FORMAT) as tar:
            for i in range(start, min(len(lengths), start + 100)):
                data = " ".join("x" for _ in range(lengths[i])).encode()
                info = tarfile.TarInfo(f"{name}{i:05d}.txt")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    prepare_dataset(
        root / name,
        split_ratio=[("train", 1)],
        sample_type="TextSample",
        field_map={"text": "txt"},
        progress=False,
    )
    return root / name


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mix")
    _captions(root, "web", 80)
    _captions(root, "cur", 60)
    rng = rng_for(0, "test_mix")
    short = [max(5, int(x)) for x in rng.lognormal(math.log(25), 0.5, 400)]
    long = [min(400, max(40, int(x))) for x in rng.lognormal(math.log(150), 0.5, 300)]
    _texts(root, "short", short)
    _texts(root, "long", long)
    return root


def _meta(root: Path, name: str, split: str) -> Path:
    path = root / name
    path.write_text(
        f"__module__: energon_lite\n__class__: MetadatasetV2\nsplits:\n  train:\n{split}"
    )
    return path


def _ramp(data: Path, composition: str = "stratified") -> Path:
    return _meta(
        data,
        f"ramp_{composition}.yaml",
        f"    batch_composition: {composition}\n    blend:\n"
        f"      - path: ./web\n        weight: {RAMP}\n"
        f"      - path: ./cur\n        weight: {RAMP_BACK}\n",
    )


def _loader(path: Any, rank: int = 0, world: int = 1, workers: int = 2, **options: Any):
    options.setdefault("batch_size", 10)
    options.setdefault("shuffle_buffer_size", 16)
    dataset = el.get_train_dataset(
        path,
        worker_config=el.WorkerConfig(rank, world, workers),
        max_samples_per_sequence=5,
        **options,
    )
    return el.get_savable_loader(dataset, stats=True)


def _sources(batch: Any) -> Counter:
    return Counter(key[:3] for key in batch.__key__)


def _web_share(step: int) -> float:
    web = WeightSchedule([[0, 9], [20, 9], [60, 1]])(step)
    return web / (web + WeightSchedule([[0, 1], [20, 1], [60, 9]])(step))


# schedules and stratified batches -----------------------------------------------------------


def test_schedule_yaml_stratified_batches_follow_the_ramp_exactly_on_every_rank(data):
    """Batch ``t`` (the loader's step, spread over 2 workers) holds web and cur in the
    largest-remainder split of the schedule at ``t``, the same on both ranks."""
    path = _ramp(data)
    for rank in range(2):
        loader = _loader(path, rank=rank, world=2)
        for step, batch in enumerate(take(loader, 70)):
            web = largest_remainder(10, [_web_share(step), 1 - _web_share(step)])[0]
            assert _sources(batch) == Counter({"web": web, "cur": 10 - web}) - Counter(), step
        loader.close()


def test_schedule_through_the_api_mapping_and_a_weight_at_callable(data, monkeypatch):
    """The same blend given in code: a mapping with a WeightSchedule, and one with a plain
    callable weight_at(step) that switches sources at step 30."""
    monkeypatch.chdir(data)
    ramp = {
        "__module__": "energon_lite",
        "__class__": "MetadatasetV2",
        "splits": {
            "train": {
                "batch_composition": "stratified",
                "blend": [
                    {"path": "web", "weight": WeightSchedule([[0, 9], [20, 9], [60, 1]])},
                    {"path": "cur", "weight": {"schedule": [[0, 1], [20, 1], [60, 9]]}},
                ],
            }
        },
    }
    got = [_sources(b) for b in take(_loader(ramp), 70)]
    from_yaml = [_sources(b) for b in take(_loader(_ramp(data)), 70)]
    assert got == from_yaml

    def weight_at(step: int) -> float:
        return 1.0 if step < 30 else 0.0

    switch = {
        "__module__": "energon_lite",
        "__class__": "MetadatasetV2",
        "splits": {
            "train": {
                "batch_composition": "stratified",
                "blend": [{"path": "web", "weight": weight_at}, {"path": "cur", "weight": 1}],
            }
        },
    }
    counts = [_sources(b) for b in take(_loader(switch), 40)]
    assert all(c == Counter({"web": 5, "cur": 5}) for c in counts[:30])
    assert all(c == Counter({"cur": 10}) for c in counts[30:])


def test_random_composition_proportions_within_sampling_error(data):
    """``random`` draws each sample by the scheduled weight: before the ramp 90% web,
    after it 10%, each within 4 standard deviations."""
    batches = take(_loader(_ramp(data, "random"), shuffle_buffer_size=None), 140)
    for steps, share in ((range(0, 20), 0.9), (range(60, 140), 0.1)):
        n = 10 * len(steps)
        web = sum(_sources(batches[s])["web"] for s in steps)
        assert abs(web - share * n) <= 4 * math.sqrt(n * share * (1 - share)), (web, n)


def test_per_source_batches_come_from_one_source_drawn_by_weight(data):
    path = _meta(
        data,
        "per_source.yaml",
        "    batch_composition: per_source\n    blend:\n"
        "      - path: ./web\n        weight: 3\n      - path: ./cur\n        weight: 1\n",
    )
    batches = [_sources(b) for b in take(_loader(path), 200)]
    assert all(len(c) == 1 and sum(c.values()) == 10 for c in batches)
    web = sum(1 for c in batches if "web" in c)
    assert abs(web - 150) <= 4 * math.sqrt(200 * 0.75 * 0.25)


def test_composition_in_a_nested_metadataset_split(data):
    """A nested metadataset's split declares the composition; the outer file refers to it."""
    _ramp(data)
    outer = _meta(data, "outer.yaml", "    path: ./ramp_stratified.yaml\n")
    for step, batch in enumerate(take(_loader(outer), 40)):
        web = largest_remainder(10, [_web_share(step), 1 - _web_share(step)])[0]
        assert _sources(batch)["web"] == web


def test_nested_schedules_multiply_down_the_tree(data):
    """An outer fixed 1:1 blend of a leaf and an inner scheduled blend: the inner leaves'
    shares are half the inner schedule's."""
    _meta(
        data,
        "inner.yaml",
        "    blend:\n      - path: ./web\n        weight: {schedule: [[0, 1], [10, 0]]}\n"
        "      - path: ./cur\n        weight: 1\n",
    )
    outer = _meta(
        data,
        "outer2.yaml",
        "    batch_composition: stratified\n    blend:\n"
        "      - path: ./inner.yaml\n        weight: 1\n"
        "      - path: ./short\n        weight: 1\n",
    )
    batches = take(_loader(outer, batch_size=8), 12)
    assert Counter(k[:3] for k in batches[0].__key__) == Counter({"web": 2, "cur": 2, "sho": 4})
    assert Counter(k[:3] for k in batches[11].__key__) == Counter({"cur": 4, "sho": 4})


# resume -------------------------------------------------------------------------------------


def test_exact_resume_mid_ramp(data):
    """Saved inside the ramp (and at its start and end), restored, the next batches match."""
    assert_loader_resumes(lambda: _loader(_ramp(data)), 50, [0, 7, 21, 33, 46])
    assert_loader_resumes(lambda: _loader(_ramp(data, "random")), 45, [25, 38])
    assert_loader_resumes(lambda: _loader(_ramp(data, "per_source")), 40, [23, 31])


def test_elastic_restore_across_a_schedule_change_point(data):
    """Saved by 2 ranks x 2 workers at step 15 (before the change point at 20), restored on
    1 rank x 3 workers: the schedule continues at step 15, so each batch's composition is
    the split at its global step, across the change point."""
    path = _ramp(data)
    states = []
    for rank in range(2):
        old = _loader(path, rank=rank, world=2, workers=2, repeat=True)
        take(old, 15)
        states.append(old.save_state_rank())
        old.close()
    new = _loader(path, rank=0, world=1, workers=3)
    new.restore_state_global(states)
    for offset, batch in enumerate(take(new, 30)):
        step = 15 + offset
        web = largest_remainder(10, [_web_share(step), 1 - _web_share(step)])[0]
        assert _sources(batch)["web"] == web, step
    new.close()


# token weights --------------------------------------------------------------------------------


@dataclass
class Tokens(el.Sample):
    tokens: torch.Tensor | None = None
    members: int = 1


class PackingEncoder(el.TaskEncoder):
    """Tokens = words; packs of at most 600 tokens (best fit); the default sample_cost."""

    def preencode_sample(self, sample: Any) -> Tokens:
        return Tokens.derive_from(sample, tokens=torch.ones(len(sample.text.split())))

    def select_samples_to_pack(self, samples: list[Any]) -> list[list[Any]]:
        return best_fit(samples, 600, length=lambda s: len(s.tokens))

    def pack_selected_samples(self, samples: list[Any]) -> Tokens:
        return Tokens.derive_from(
            samples[0], tokens=torch.cat([s.tokens for s in samples]), members=len(samples)
        )

    def batch(self, samples: list[Any]) -> list[Any]:
        return samples


def _token_meta(data: Path, unit: str) -> Path:
    return _meta(
        data,
        f"tokens_{unit}.yaml",
        f"    weight_unit: {unit}\n    blend:\n"
        "      - path: ./short\n        weight: 1\n      - path: ./long\n        weight: 1\n",
    )


def _token_loader(data: Path, unit: str, **options: Any):
    return _loader(
        _token_meta(data, unit),
        batch_size=4,
        packing_buffer_size=40,
        task_encoder=PackingEncoder(),
        **options,
    )


def _token_shares(loader: Any, batches: int) -> tuple[float, float]:
    """(short's share of delivered tokens, short's share of delivered samples), from the
    packs' restore keys (each member's leaf) and its tokens."""
    tokens = Counter()
    samples = Counter()
    for batch in take(loader, batches):
        for pack in batch:
            members = pack.__restore_key__.members
            lengths = _lengths(loader, members)
            for member, length in zip(members, lengths):
                tokens[member.leaf] += length
                samples[member.leaf] += 1
    return tokens[0] / sum(tokens.values()), samples[0] / sum(samples.values())


def _lengths(loader: Any, members: list[Any]) -> list[int]:
    pipeline = loader.dataset.pipeline
    out = []
    for key in members:
        _, parts = pipeline.datasets[key.leaf].read(key.shard, key.sample)
        out.append(len(parts["txt"].split()))
    return out


class _CostOf(PackingEncoder):
    """``sample_cost`` gives ``bad`` for the long source's samples, words elsewhere."""

    def __init__(self, bad: float) -> None:
        super().__init__()
        self.bad = bad

    def sample_cost(self, sample: Any) -> float:
        return self.bad if sample.__key__.startswith("long") else float(len(sample.tokens))


@pytest.mark.parametrize("bad", [0, 0.0, math.inf, math.nan, -1.0])
def test_a_sample_cost_of_zero_or_infinity_stops_naming_the_entry(data, bad):
    """A cost that never moves a source's tally (0, inf) would starve the other source;
    like NaN and negatives it stops the run, naming the blend entry and the value."""
    loader = _loader(
        _token_meta(data, "tokens"),
        batch_size=4,
        packing_buffer_size=40,
        task_encoder=_CostOf(bad),
        workers=0,
    )
    with pytest.raises(ConfigError, match=r"sample_cost gave .* blend entry 1 \(.*long\)"):
        take(loader, 30)


def test_token_weights_deliver_the_target_token_share(data):
    """50:50 by tokens: the delivered token share within 1 percentage point over 300 packed
    sequences; the same blend by samples gives the short source far less (its samples are
    about 6x shorter)."""
    by_tokens, _ = _token_shares(_token_loader(data, "tokens"), 75)
    by_samples, sample_share = _token_shares(_token_loader(data, "samples"), 75)
    assert abs(by_tokens - 0.5) <= 0.01, by_tokens
    assert by_samples < 0.3 and abs(sample_share - 0.5) < 0.1, (by_samples, sample_share)


def test_token_weights_resume_exactly_mid_pack(data):
    """States saved with samples in the packing buffer (mid-pack) restore to the same packs."""
    assert_loader_resumes(lambda: _token_loader(data, "tokens"), 24, [0, 5, 13])


def test_deficit_rule_is_deterministic_and_picks_the_lagging_source():
    # source 0 costed 100 over 10 samples, source 1 costed 300 over 2 and 1 more drawn
    assert deficit_choice([1.0, 1.0], [[10, 10, 100.0], [3, 2, 300.0]]) == 0
    assert deficit_choice([1.0, 3.0], [[1, 1, 10.0], [1, 1, 10.0]]) == 1
    assert deficit_choice([1.0, 0.0], [[5, 5, 1000.0], [0, 0, 0.0]]) == 0
    assert largest_remainder(10, [0.55, 0.45]) == [6, 4]
    assert largest_remainder(7, [1, 1, 1]) == [3, 2, 2]


# refusals and validation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("weight", "message"),
    [
        ("{schedule: [[10, 1], [0, 2]]}", r"blend\[0\]\.weight: points are not sorted"),
        ("{schedule: [[0, 1], [10, -2]]}", r"blend\[0\]\.weight: .*negative"),
        ("{schedule: [[0, 1]], interpolate: cubic}", r"blend\[0\]\.weight: interpolate"),
        ("{schedul: [[0, 1]]}", r"blend\[0\]\.weight\.schedul"),
    ],
)
def test_bad_schedules_name_the_entry(data, weight, message):
    path = _meta(
        data,
        "bad.yaml",
        f"    blend:\n      - path: ./web\n        weight: {weight}\n"
        "      - path: ./cur\n        weight: 1\n",
    )
    with pytest.raises(DatasetFormatError, match=message) as info:
        _loader(path)
    assert "bad.yaml" in str(info.value)


def test_all_weights_zero_at_some_step_is_refused(data):
    path = _meta(
        data,
        "zero.yaml",
        "    blend:\n      - path: ./web\n        weight: {schedule: [[0, 1], [10, 0]]}\n"
        "      - path: ./cur\n        weight: {schedule: [[0, 0], [10, 0], [20, 1]]}\n",
    )
    with pytest.raises(
        DatasetFormatError, match=r"zero.yaml: splits.train.blend: every weight is 0 at step 10"
    ):
        _loader(path)


def test_blend_epochized_refuses_a_schedule(data):
    path = _meta(
        data,
        "epochized.yaml",
        "    blend_epochized:\n      - path: ./web\n        repetitions: {schedule: [[0, 1]]}\n"
        "      - path: ./cur\n        repetitions: 1\n",
    )
    with pytest.raises(DatasetFormatError, match=r"repetitions: a schedule in a blend_epochized"):
        _loader(path)
    with pytest.raises(ConfigError, match="blend_epochized cannot follow a weight schedule"):
        EpochizedBlend([], [WeightSchedule([[0, 1]])], 0, 0)  # type: ignore[list-item]


def test_composition_refusals(data):
    with pytest.raises(DatasetFormatError, match=r"batch_composition: 'mixed'; allowed"):
        _loader(
            _meta(data, "c.yaml", "    batch_composition: mixed\n    blend:\n      - path: ./web\n")
        )
    with pytest.raises(ConfigError, match="with packing"):
        _loader(_ramp(data), packing_buffer_size=10, task_encoder=PackingEncoder())


# the mix you got --------------------------------------------------------------------------------


def test_two_entries_reaching_the_same_dataset_draw_independently(data):
    """Two blend entries on the same folder (one directly, one through a nested file) are two
    leaves with orders of their own, not the same order twice (Energon #266)."""
    _meta(data, "web_only.yaml", "    path: ./web\n")
    path = _meta(
        data,
        "twice.yaml",
        "    batch_composition: stratified\n    blend:\n"
        "      - path: ./web\n        weight: 1\n      - path: ./web_only.yaml\n        weight: 1\n",
    )
    first: list[str] = []
    second: list[str] = []
    for batch in take(_loader(path, workers=1, batch_size=2, shuffle_buffer_size=None), 40):
        for key, restore in zip(batch.__key__, batch.__restore_key__):
            (first if restore.leaf == 0 else second).append(key)
    assert len(first) == len(second) == 40
    assert first[:20] != second[:20]


def test_stats_report_the_delivered_mix_against_the_target(data):
    loader = _loader(_ramp(data), workers=1)
    take(loader, 40)
    mix = loader.stats()["mix"]
    assert mix["step"] == 40
    web, cur = mix["sources"]
    assert web["target"] == pytest.approx(_web_share(40))
    expected_web = sum(
        largest_remainder(10, [_web_share(s), 1 - _web_share(s)])[0] for s in range(40)
    )
    assert web["samples"] == expected_web and cur["samples"] == 400 - expected_web
    assert web["tokens"] is None
    text = "\n".join(format_stats(loader.stats()))
    assert "mix at step 40" in text and f"{expected_web:,} samples" in text


def test_stats_report_delivered_tokens(data):
    """With weight_unit: tokens the report has each source's delivered tokens: 50:50."""
    loader = _token_loader(data, "tokens", workers=1)
    take(loader, 60)
    short, long = loader.mix()["sources"]
    assert short["tokens"] > 0 and abs(short["token_share"] - 0.5) < 0.02
    assert short["target"] == long["target"] == 0.5


def test_bench_prints_and_plots_the_mix(data, tmp_path):
    """``energon-lite bench`` on a scheduled metadataset: the mix per source in the report
    and printed, its readings over the run, and mix.png."""
    lines: list[str] = []
    report = run_bench(
        _ramp(data),
        num_workers=1,
        seconds=2.0,
        batch_size=10,
        out=tmp_path,
        print_fn=lines.append,
    )
    assert [s["path"].split(" ")[0].rsplit("/", 1)[-1] for s in report["mix"]["sources"]] == [
        "web",
        "cur",
    ]
    assert any(line.startswith("mix at step") for line in lines)
    readings = report["mix_timeline"]
    assert readings and [m["step"] for m in readings] == sorted(m["step"] for m in readings)
    for shares in windowed_shares(readings, "samples"):
        assert sum(shares) == pytest.approx(1.0)
    assert (tmp_path / "mix.png").stat().st_size > 0


class GroupedEncoder(el.TaskEncoder):
    """Groups by the parity of the sample number: batches of 4 (odd) or 6 (even)."""

    def batch_group_criterion(self, sample: Any) -> tuple[Any, int]:
        odd = int(sample.__key__[-1]) % 2
        return odd, 4 if odd else 6


def test_per_source_applies_within_each_group_of_grouped_batching(data):
    path = _meta(
        data,
        "per_source_grouped.yaml",
        "    batch_composition: per_source\n    blend:\n"
        "      - path: ./web\n        weight: 1\n      - path: ./cur\n        weight: 1\n",
    )
    batches = take(_loader(path, batch_size=None, task_encoder=GroupedEncoder()), 80)
    seen = Counter()
    for batch in batches:
        sources = _sources(batch)
        parities = {int(k[-1]) % 2 for k in batch.__key__}
        assert len(sources) == 1 and len(parities) == 1, batch.__key__
        assert len(batch.__key__) == (4 if parities == {1} else 6)
        seen[(next(iter(sources)), parities.pop())] += 1
    assert set(seen) == {("web", 0), ("web", 1), ("cur", 0), ("cur", 1)}
    with pytest.raises(ConfigError, match="stratified with grouped batching"):
        _loader(_ramp(data), batch_size=None, task_encoder=GroupedEncoder())


def test_info_shows_a_scheduled_weight(data, capsys):
    from energon_lite.cli.main import main

    assert main(["info", str(_ramp(data))]) == 0
    out = capsys.readouterr().out
    assert "scheduled weight, 0.9 at step 0 (90.0% of samples)" in out
    assert "scheduled weight, 0.1 at step 0 (10.0% of samples)" in out


def test_a_weight_at_callable_giving_a_negative_weight_stops_with_its_value(data, monkeypatch):
    monkeypatch.chdir(data)
    meta = {
        "__module__": "energon_lite",
        "__class__": "MetadatasetV2",
        "splits": {
            "train": {
                "blend": [
                    {"path": "web", "weight": lambda step: 1.0 if step < 3 else -1.0},
                    {"path": "cur", "weight": 1},
                ]
            }
        },
    }
    loader = _loader(meta, workers=0, shuffle_buffer_size=None)
    with pytest.raises(ConfigError, match=r"weight_at\(3\) gave -1.0"):
        take(loader, 5)


def test_checkpoint_info_shows_the_blend_tally(data, tmp_path):
    """``energon-lite checkpoint info`` says what the blend drew per source."""
    import subprocess
    import sys

    loader = _loader(_ramp(data), workers=0)
    take(loader, 4)
    torch.save({"data": [loader.save_state_rank()]}, tmp_path / "run.pt")
    done = subprocess.run(
        [sys.executable, "-m", "energon_lite.cli", "checkpoint", "info", str(tmp_path / "run.pt")],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "blend drew 36, 4 samples per source" in done.stdout, done.stdout


def test_a_composed_batch_resumes_mid_batch_at_the_stage(data):
    """States saved after every sample, inside a stratified (and a per-source) batch,
    restore to the same rest of the stream: the batch's remaining draws are in the state."""
    from energon_lite.shards.dataset import PreparedDataset
    from energon_lite.stages.blend_weighted import WeightedBlend
    from energon_lite.testing import assert_stage_resumes, make_reader

    sets = [PreparedDataset(data / "web", "train"), PreparedDataset(data / "cur", "train")]

    def make(composition: str) -> WeightedBlend:
        readers = [make_reader(ds, leaf_id=i) for i, ds in enumerate(sets)]
        weights = [WeightSchedule([[0, 3]]), 1.0]
        return WeightedBlend(readers, weights, 5, 0, composition=composition, batch_size=8)

    for composition in ("stratified", "per_source"):
        keys = [key for key, _, _ in assert_stage_resumes(lambda c=composition: make(c), 40)]
        if composition == "stratified":  # 3:1 in every 8: 6 web, 2 cur
            assert all(Counter(k[:3] for k in keys[i : i + 8])["web"] == 6 for i in (0, 8, 16))
