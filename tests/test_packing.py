from __future__ import annotations

import itertools
from collections import Counter

import pytest

from energon_lite.errors import ConfigError
from energon_lite.rng import rng_for
from energon_lite.task_encoder.packing import (
    best_fit,
    first_fit_decreasing,
    long_tailed_lengths,
    packing_efficiency,
)

PACKERS = [first_fit_decreasing, best_fit]
TARGET = 4096


def _identity(x: int) -> int:
    return x


def _check_valid(groups: list[list[int]], items: list[int], max_length: int) -> None:
    """Every item exactly once (by identity of position), no group over max_length."""
    flat = [x for g in groups for x in g]
    assert Counter(flat) == Counter(items)
    assert all(g for g in groups)
    assert all(sum(g) <= max_length for g in groups)


def _stream_efficiency(packer, buffer_size: int, num_buffers: int, seed: int) -> float:
    rng = rng_for(seed, "packing-efficiency")
    tokens = packs = 0
    for _ in range(num_buffers):
        lengths = long_tailed_lengths(buffer_size, rng)
        groups = packer(lengths, TARGET, length=_identity)
        _check_valid(groups, lengths, TARGET)
        tokens += sum(lengths)
        packs += len(groups)
    return tokens / (packs * TARGET)


@pytest.mark.parametrize("packer", PACKERS)
def test_random_lists_are_covered_exactly_without_overflow(packer) -> None:
    for case in range(300):
        rng = rng_for(7, "random-lists", case)
        max_length = int(rng.integers(1, 60))
        n = int(rng.integers(0, 40))
        lengths = rng.integers(0, max_length + 1, size=n).tolist()
        groups = packer(lengths, max_length, length=_identity)
        _check_valid(groups, lengths, max_length)


@pytest.mark.parametrize("packer", PACKERS)
def test_samples_are_returned_as_objects_each_exactly_once(packer) -> None:
    # Equal lengths, distinct objects: coverage must be by identity, not by value.
    samples = [{"id": i, "tokens": [0] * (i % 5 + 1)} for i in range(50)]
    groups = packer(samples, 7, length=lambda s: len(s["tokens"]))
    ids = sorted(s["id"] for g in groups for s in g)
    assert ids == list(range(50))
    assert all(sum(len(s["tokens"]) for s in g) <= 7 for g in groups)


def _optimal_bins(lengths: list[int], max_length: int) -> int:
    """Fewest bins, by trying every assignment (only for tiny inputs)."""
    best = len(lengths)
    for assignment in itertools.product(range(len(lengths)), repeat=len(lengths)):
        loads = Counter()
        for size, b in zip(lengths, assignment):
            loads[b] += size
        if all(v <= max_length for v in loads.values()):
            best = min(best, len(loads))
    return best


@pytest.mark.parametrize("packer", PACKERS)
def test_within_known_bound_of_brute_force_optimum(packer) -> None:
    # FFD and BFD never use more than 11/9 OPT + 6/9 bins; on tiny inputs they are
    # usually optimal, so also check they hit the optimum most of the time.
    hits = 0
    for case in range(40):
        rng = rng_for(11, "brute", case)
        lengths = rng.integers(1, 11, size=int(rng.integers(1, 7))).tolist()
        opt = _optimal_bins(lengths, 10)
        got = len(packer(lengths, 10, length=_identity))
        assert got <= 11 / 9 * opt + 6 / 9
        hits += got == opt
    assert hits >= 36


def test_best_fit_and_first_fit_differ_on_the_tightest_pack() -> None:
    # Capacity 10. 8 -> A (room 2), 6 -> B (room 4), 3 -> B (room 1; A cannot take it).
    # Then 1: first fit takes the oldest pack with room (A, room 2), best fit the tightest
    # (B, room 1).
    items = [1, 3, 8, 6]
    assert first_fit_decreasing(items, 10, length=_identity) == [[8, 1], [6, 3]]
    assert best_fit(items, 10, length=_identity) == [[8], [6, 3, 1]]


def test_best_fit_ties_go_to_the_oldest_pack() -> None:
    # 7 -> A (room 3), 7 -> B (room 3); 3 fits both with the same room: A, the oldest.
    assert best_fit([3, 7, 7], 10, length=_identity) == [[7, 3], [7]]


@pytest.mark.parametrize("packer", PACKERS)
def test_output_is_deterministic_and_stable_on_ties(packer) -> None:
    samples = [("a", 3), ("b", 3), ("c", 3), ("d", 5), ("e", 2)]
    first = packer(samples, 8, length=lambda s: s[1])
    assert packer(list(samples), 8, length=lambda s: s[1]) == first
    # Equal lengths keep buffer order: a before b before c wherever they land.
    order = [s[0] for g in first for s in g if s[1] == 3]
    assert order == ["a", "b", "c"]
    assert first == [[("d", 5), ("a", 3)], [("b", 3), ("c", 3), ("e", 2)]]


@pytest.mark.parametrize("packer", PACKERS)
def test_oversize_raises_naming_index_and_length(packer) -> None:
    with pytest.raises(ConfigError, match=r"sample 2 has length 11 > max_length=10"):
        packer([3, 4, 11, 2], 10, length=_identity)


@pytest.mark.parametrize("packer", PACKERS)
def test_oversize_alone_gets_its_own_group(packer) -> None:
    groups = packer([3, 12, 4, 11, 2], 10, length=_identity, oversize="alone")
    assert groups[:2] == [[12], [11]]
    _check_valid(groups[2:], [3, 4, 2], 10)


@pytest.mark.parametrize("packer", PACKERS)
def test_bad_arguments_raise_config_error(packer) -> None:
    with pytest.raises(ConfigError, match="max_length=0"):
        packer([1], 0, length=_identity)
    with pytest.raises(ConfigError, match="oversize='drop'"):
        packer([1], 4, length=_identity, oversize="drop")
    with pytest.raises(ConfigError, match="sample 1 has negative length -1"):
        packer([1, -1], 4, length=_identity)


@pytest.mark.parametrize("packer", PACKERS)
def test_empty_buffer_gives_no_groups(packer) -> None:
    assert packer([], 10) == []


def test_default_length_is_len() -> None:
    groups = best_fit(["aaaa", "bb", "ccc", "d"], 5)
    assert groups == [["aaaa", "d"], ["ccc", "bb"]]


def test_packing_efficiency() -> None:
    assert packing_efficiency([[3, 4], [5]], 10, length=_identity) == pytest.approx(0.6)
    assert packing_efficiency([], 10) == 0.0


def test_long_tailed_lengths_shape() -> None:
    lengths = long_tailed_lengths(20_000, rng_for(3, "shape"))
    assert min(lengths) >= 50 and max(lengths) <= 2000
    assert lengths == long_tailed_lengths(20_000, rng_for(3, "shape"))
    ordered = sorted(lengths)
    median, p90 = ordered[len(ordered) // 2], ordered[int(len(ordered) * 0.9)]
    # Long right tail: the 90th percentile far above the median, mean above the median.
    assert 250 <= median <= 350
    assert p90 >= 3 * median
    assert sum(lengths) / len(lengths) > 1.3 * median


def test_best_fit_efficiency_at_buffer_1000() -> None:
    assert _stream_efficiency(best_fit, 1000, 10, seed=0) >= 0.98


def test_first_fit_decreasing_efficiency_at_buffer_200() -> None:
    assert _stream_efficiency(first_fit_decreasing, 200, 50, seed=0) >= 0.95
