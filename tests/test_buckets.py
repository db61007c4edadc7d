from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import msgpack
import pytest

from energon_lite.errors import ConfigError, SkipSample
from energon_lite.flavors.video_text.aspect_ratios import (
    known_resolutions,
    nearest_ratio,
    px_aspect_ratios,
    resolution_table,
)
from energon_lite.flavors.video_text.buckets import (
    BucketAssigner,
    BucketConfig,
    BucketId,
    make_batch_group_criterion,
)
from energon_lite.stages.bucket_sync import choose_bucket

# The requirements doc's per-aspect-ratio example (first number: sampling weight).
DOC_CONFIG = {
    "1:1": {
        256: {1: (1.0, 64), 17: (1.0, 16), 65: (0.5, 4)},
        512: {1: (1.0, 16), 17: (1.0, 4), 65: (0.25, 1)},
    },
    "16:9": {
        "240x426": {17: (1.0, 8), 65: (0.5, 2)},
        "480x854": {17: (0.5, 2), 65: (0.25, 1)},
    },
    "9:16": {"426x240": {17: (1.0, 8)}},
}


def _assign(config, shape, key=0, seed=0):
    return BucketAssigner(config, seed).assign(*shape, key)


# --- aspect-ratio tables -------------------------------------------------------------


def test_tables_match_open_sora_spot_values() -> None:
    pixels, table = resolution_table("240p")
    assert pixels == 240 * 426 and len(table) == 17
    assert table["0.56"] == (240, 426) and table["1.78"] == (426, 240)
    assert resolution_table("720p")[1]["1.00"] == (960, 960)
    assert resolution_table("144p")[0] == 36864
    # PixArt image tables: 1024 stored, the others scaled by N / 1024.
    assert resolution_table("1024")[1]["0.25"] == (512, 2048)
    assert resolution_table("256")[0] == 256 * 256
    assert resolution_table("256")[1]["0.25"] == (128, 512)
    assert resolution_table("2048")[1]["4.00"] == (4096, 1024)
    assert known_resolutions()[:3] == ["144p", "256", "240p"]


def test_px_tables_follow_open_sora_2_formula() -> None:
    table = px_aspect_ratios(256 * 256)
    # Values computed by Open-Sora 2.0's get_aspect_ratios_dict(256 * 256).
    assert table["1:1"] == (256, 256)
    assert table["16:9"] == (192, 336) and table["9:16"] == (336, 192)
    assert table["2.39:1"] == (160, 400) and table["1:2.39"] == (400, 160)
    # 1.85:1 rounds to the same shape as 16:9 and is dropped, as in Open-Sora.
    assert "1.85:1" not in table and "5:8" not in table
    assert len(table) == 11
    assert resolution_table("768px")[0] == 768 * 768
    assert resolution_table("768px")[1]["1:1"] == (768, 768)


def test_nearest_ratio() -> None:
    table = resolution_table("240p")[1]
    assert nearest_ratio(720, 1280, table) == "0.56"
    assert nearest_ratio(1280, 720, table) == "1.78"
    assert nearest_ratio(999, 1000, table) == "1.00"
    assert nearest_ratio(100, 1000, table) == "0.38"  # beyond the table: the extreme
    assert nearest_ratio(3000, 1000, table) == "2.08"


def test_unknown_resolution_names_the_value() -> None:
    with pytest.raises(ConfigError, match=r"unknown resolution '300p'.*240p"):
        resolution_table("300p")


# --- resolution form: the rules --------------------------------------------------------


def test_pixel_threshold_is_80_percent_inclusive() -> None:
    config = {"240p": {1: (1.0, 4)}}
    # 0.8 * 240 * 426 = 81792 = 288 * 284.
    assert _assign(config, (1, 288, 284)) == BucketId("240p", 1, "1.00", 320, 320, 4)
    assert _assign(config, (1, 288, 283)) is None


def test_resolutions_tried_from_most_pixels() -> None:
    config = {"240p": {1: (1.0, 4)}, "480p": {1: (1.0, 2)}}
    # 480p threshold: 0.8 * 480 * 854 = 384 * 854.
    assert _assign(config, (1, 384, 854)).resolution == "480p"
    assert _assign(config, (1, 383, 854)).resolution == "240p"
    assert _assign(config, (1, 2000, 3000)).resolution == "480p"


def test_largest_frame_count_the_sample_fills() -> None:
    config = {"240p": {16: (1.0, 8), 32: (1.0, 4)}}
    shape = (240, 426)
    assert _assign(config, (32, *shape)).num_frames == 32
    assert _assign(config, (31, *shape)).num_frames == 16
    assert _assign(config, (16, *shape)).num_frames == 16
    assert _assign(config, (15, *shape)) is None
    assert _assign(config, (1, *shape)) is None  # an image needs a 1-frame bucket


def test_images_only_in_frame_one_and_videos_never() -> None:
    config = {"240p": {1: (1.0, 64), 16: (1.0, 8)}}
    assert _assign(config, (1, 240, 426)).num_frames == 1
    assert _assign(config, (10, 240, 426)) is None
    # An image falls to a lower resolution that has a 1-frame bucket.
    config = {"480p": {16: (1.0, 2)}, "240p": {1: (1.0, 64)}}
    assert _assign(config, (1, 480, 854)) == BucketId("240p", 1, "0.56", 240, 426, 64)


def test_bucket_id_carries_target_and_batch_size() -> None:
    bucket = _assign({"240p": {16: (1.0, 8)}}, (20, 1080, 1920))
    assert bucket == ("240p", 16, "0.56", 240, 426, 8)
    assert bucket.target == (16, 240, 426) and bucket.batch_size == 8
    assert BucketId(*msgpack.unpackb(msgpack.packb(bucket))) == bucket
    assert len({bucket, BucketId(*bucket)}) == 1


def test_keep_probability_falls_through_with_expected_frequencies() -> None:
    config = {"480p": {16: (0.3, 4)}, "240p": {16: (0.5, 8), 32: (0.5, 4)}}
    assigner = BucketAssigner(config, seed=1)
    n = 4000
    counts = Counter()
    for i in range(n):
        bucket = assigner.assign(40, 480, 854, ("shard", i, 0))
        counts[None if bucket is None else (bucket.resolution, bucket.num_frames)] += 1
    # Kept at 480p 30%; else 240p picks 32 frames (not 16) and keeps half; else dropped
    # (Open-Sora does not retry a smaller frame count of the same resolution).
    assert counts[("480p", 16)] / n == pytest.approx(0.30, abs=0.03)
    assert counts[("240p", 32)] / n == pytest.approx(0.35, abs=0.03)
    assert counts[None] / n == pytest.approx(0.35, abs=0.03)
    assert counts[("240p", 16)] == 0


def test_zero_probability_disables_and_allows_none_batch_size() -> None:
    config = {"240p": {16: (1.0, 8), 32: (0.0, None)}}
    assert _assign(config, (40, 240, 426)) is None  # 32 fits, is never kept, falls through
    assert all(b.num_frames == 16 for b in BucketConfig(config).bucket_ids())


def test_next_frames_probability_pair_form() -> None:
    # Open-Sora 2.0: ((keep, next_frames), bs): with next_frames, move to the next smaller t.
    assigner = BucketAssigner({"240p": {32: ((1.0, 0.25), 4), 16: (1.0, 8)}}, seed=0)
    counts = Counter(assigner.assign(40, 240, 426, k).num_frames for k in range(4000))
    assert counts[16] / 4000 == pytest.approx(0.25, abs=0.03)
    assert counts[32] + counts[16] == 4000


def test_assignment_is_deterministic_across_instances_and_processes() -> None:
    config = {"480p": {16: (0.3, 4)}, "240p": {16: (0.5, 8), 32: (0.5, 4)}}
    keys = [["shard-3", i, 2] for i in range(200)]
    here = [BucketAssigner(config, 7).assign(40, 720, 1280, k) for k in keys]
    again = [BucketAssigner(BucketConfig(config), 7).assign(40, 720, 1280, k) for k in keys]
    assert here == again
    other_seed = [BucketAssigner(config, 8).assign(40, 720, 1280, k) for k in keys]
    assert other_seed != here
    code = (
        "import json, sys\n"
        "from energon_lite.flavors.video_text.buckets import BucketAssigner\n"
        "config, keys = json.loads(sys.stdin.read())\n"
        "a = BucketAssigner(config, 7)\n"
        "print(json.dumps([a.assign(40, 720, 1280, k) for k in keys]))\n"
    )
    # JSON turns int frame keys into strings; the parser accepts both.
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps([config, keys]),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    there = [None if b is None else BucketId(*b) for b in json.loads(out)]
    assert there == here


def test_golden_assignments() -> None:
    # Pins the derivation of the random decisions; a change here breaks resumed runs.
    assigner = BucketAssigner({"480p": {16: (0.5, 4)}, "240p": {16: (0.5, 8)}}, seed=0)
    got = [assigner.assign(16, 480, 854, ("shard-0", i)) for i in range(12)]
    names = "".join("-" if b is None else b.resolution[0] for b in got)
    assert names == "-444--424-24"


def test_criterion_counts_drops_and_reads_restore_keys() -> None:
    criterion = make_batch_group_criterion({"240p": {16: (1.0, 8)}}, seed=0)
    ok = {"num_frames": 20, "height": 720, "width": 1280, "__restore_key__": ("s", 0)}
    assert criterion(ok) == (BucketId("240p", 16, "0.56", 240, 426, 8), 8)
    for too_small in (
        {"num_frames": 20, "height": 100, "width": 100, "__restore_key__": ("s", 1)},
        {"num_frames": 8, "height": 720, "width": 1280, "__restore_key__": ("s", 2)},
    ):
        with pytest.raises(SkipSample):
            criterion(too_small)
    assert criterion.dropped == 2
    assert sum(criterion.counts.values()) == 1

    class Sample:
        __restore_key__ = ("s", 3)
        video = (20, 720, 1280)

    custom = make_batch_group_criterion({"240p": {16: (1.0, 8)}}, 0, shape_of=lambda s: s.video)
    assert custom(Sample())[1] == 8
    with pytest.raises(ConfigError, match="no __restore_key__"):
        criterion({"num_frames": 20, "height": 720, "width": 1280})


# --- aspect-ratio (weighted) form -------------------------------------------------------


def test_weighted_form_assigns_by_nearest_ratio_then_rules() -> None:
    assert _assign(DOC_CONFIG, (70, 720, 1280)) == BucketId("480x854", 65, "16:9", 480, 854, 1)
    assert _assign(DOC_CONFIG, (20, 720, 1280)).resolution == "480x854"
    # 300x533 is below 80% of 480x854, so 240x426.
    assert _assign(DOC_CONFIG, (20, 300, 533)) == BucketId("240x426", 17, "16:9", 240, 426, 8)
    assert _assign(DOC_CONFIG, (20, 256, 256)) == BucketId("256", 17, "1:1", 256, 256, 16)
    assert _assign(DOC_CONFIG, (1, 600, 600)) == BucketId("512", 1, "1:1", 512, 512, 16)
    assert _assign(DOC_CONFIG, (30, 1280, 720)) == BucketId("426x240", 17, "9:16", 426, 240, 8)
    assert _assign(DOC_CONFIG, (1, 1080, 1920)) is None  # 16:9 has no image buckets
    assert _assign(DOC_CONFIG, (16, 1080, 1920)) is None  # too few frames


def test_weighted_form_ratio_ties_go_to_the_smaller_ratio() -> None:
    config = {"1:1": {"400x400": {1: (1.0, 4)}}, "2:3": {"480x320": {1: (1.0, 4)}}}
    assert _assign(config, (1, 500, 400)).aspect_ratio == "1:1"  # H/W 1.25: midway
    assert _assign(config, (1, 501, 400)).aspect_ratio == "2:3"


def test_weighted_form_int_resolution_and_names() -> None:
    config = BucketConfig({"16:9": {256: {1: (1.0, 4)}, "480p": {1: (1.0, 2)}}})
    ids = {b.resolution: b for b in config.bucket_ids()}
    assert (ids["256"].height, ids["256"].width) == (192, 336)  # multiples of 16
    assert (ids["480p"].height, ids["480p"].width) == (480, 854)


def test_weighted_form_weights_and_disabled_buckets() -> None:
    weights = BucketConfig(DOC_CONFIG).weights()
    assert weights[BucketId("256", 65, "1:1", 256, 256, 4)] == 0.5
    assert weights[BucketId("480x854", 17, "16:9", 480, 854, 2)] == 0.5
    assert len(weights) == 11
    config = {"1:1": {256: {17: (0.0, None), 1: (1.0, 8)}}}
    assert _assign(config, (20, 256, 256)) is None
    assert len(BucketConfig(config).weights()) == 1


def test_resolution_form_weights_and_weights_from_counts() -> None:
    config = BucketConfig({"240p": {16: (0.5, 8)}})
    weights = config.weights()
    assert len(weights) == 17 and sum(weights.values()) == pytest.approx(0.5)
    a = BucketId("240p", 16, "0.56", 240, 426, 8)
    b = BucketId("240p", 16, "1.00", 320, 320, 8)
    assert config.weights(Counter({a: 80, b: 8})) == {a: 10.0, b: 1.0}


# --- config errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, "must be a non-empty dict"),
        ({"300p": {16: (1.0, 4)}}, "unknown resolution '300p'"),
        ({"240p": {16: (1.5, 4)}}, r"bucket_config\['240p'\]\[16\]: keep_probability=1.5"),
        ({"240p": {16: (1.0, 0)}}, r"\[16\]: batch_size=0 must be an int >= 1"),
        ({"240p": {16: (0.5, None)}}, r"batch_size=None must be an int >= 1 \(or None if"),
        ({"240p": {0: (1.0, 4)}}, r"bucket_config\['240p'\]: frame count 0"),
        ({"240p": {16: (1.0,)}}, r"\[16\]=\(1.0,\) must be a pair"),
        ({"240p": {16: ((1.0, 2.0), 4)}}, "next_frames_probability=2.0"),
        ({"240p": {}}, "must be a non-empty"),
        ({"1:1": {256: {1: (1.0, 4)}}, "240p": {1: (1.0, 4)}}, "mixes aspect-ratio keys"),
        ({"16-9:x": {256: {1: (1.0, 4)}}}, "must be a ratio 'W:H'"),
        ({"16:9": {"426x240": {1: (1.0, 4)}}}, r"'426x240' has H/W 1.775 .* swap"),
        ({"16:9": {"240x426": {1: (-1.0, 4)}}}, r"\['240x426'\]\[1\]: weight=-1.0"),
        ({"16:9": {3.5: {1: (1.0, 4)}}}, "resolution 3.5 must be an int N"),
        ({"240p": {16: (1.0, 4), "16": (1.0, 2)}}, "frame count 16 is given twice"),
        ({256: {1: (1.0, 4)}, "256": {1: (1.0, 4)}}, "resolution '256' is given twice"),
    ],
)
def test_config_errors_name_the_key_and_value(config, message) -> None:
    with pytest.raises(ConfigError, match=message):
        BucketConfig(config)


def test_unpackable_rng_key_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"rng_key=.* is not msgpack-able"):
        _assign({"240p": {16: (0.5, 4)}}, (20, 240, 426), key=object())


# --- choose_bucket ----------------------------------------------------------------------


def test_choose_bucket_is_deterministic_and_order_independent() -> None:
    weights = {("a", 1): 1.0, ("b", 2): 2.0, ("c", 3): 3.0}
    reordered = dict(reversed(list(weights.items())))
    picks = [choose_bucket(5, step, weights) for step in range(200)]
    assert picks == [choose_bucket(5, step, reordered) for step in range(200)]
    assert picks != [choose_bucket(6, step, weights) for step in range(200)]


def test_choose_bucket_frequencies() -> None:
    weights = {"a": 1.0, "b": 2.0, "c": 7.0, "never": 0.0}
    n = 20_000
    counts = Counter(choose_bucket(0, step, weights) for step in range(n))
    assert counts["a"] / n == pytest.approx(0.1, abs=0.01)
    assert counts["b"] / n == pytest.approx(0.2, abs=0.015)
    assert counts["c"] / n == pytest.approx(0.7, abs=0.015)
    assert counts["never"] == 0


def test_choose_bucket_accepts_bucket_ids_from_config() -> None:
    weights = BucketConfig(DOC_CONFIG).weights()
    assert choose_bucket(0, 3, weights) in weights


def test_choose_bucket_errors() -> None:
    with pytest.raises(ConfigError, match=r"weights\['a'\]=-1.0"):
        choose_bucket(0, 0, {"a": -1.0})
    with pytest.raises(ConfigError, match="at least one weight > 0"):
        choose_bucket(0, 0, {"a": 0.0})
