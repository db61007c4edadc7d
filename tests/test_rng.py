"""Derived randomness: stable seeds, counter streams, keyed permutations (scalar = vectorised)."""

from __future__ import annotations

import numpy as np
import pytest

from energon_lite.rng import (
    CounterRng,
    Permutation,
    TorchStreamRng,
    derive_seed,
    energon_worker_seed,
    mix_draws,
    rng_for,
)


def test_derived_seeds_are_stable_and_key_sensitive() -> None:
    assert derive_seed(1, "a", 2) == derive_seed(1, "a", 2)
    assert (
        len(
            {
                derive_seed(1, "a", 2),
                derive_seed(1, "a", 3),
                derive_seed(2, "a", 2),
                derive_seed(1, "b", 2),
            }
        )
        == 4
    )
    assert derive_seed(0, ("Webdataset", 0, 1, 2, 0)) == derive_seed(
        0, ["Webdataset", 0, 1, 2, 0]
    )  # msgpack view
    assert rng_for(5, "x").random() == rng_for(5, "x").random()


def test_counter_stream_is_addressed_by_its_counter() -> None:
    stream = CounterRng(3, "k")
    draws = [stream.random() for _ in range(3000)]
    assert stream.counter == 3000
    resumed = CounterRng(3, "k", counter=1500)
    assert [resumed.random() for _ in range(1500)] == draws[1500:]
    assert all(0 <= d < 1 for d in draws) and abs(np.mean(draws) - 0.5) < 0.03
    assert all(0 <= CounterRng(1, "i").integers(7) < 7 for _ in range(10))
    with pytest.raises(ValueError, match="high >= 1"):
        stream.integers(0)


def test_energon_stream_is_energons_worker_stream_addressed_by_a_counter() -> None:
    """TorchStreamRng draws what Energon's WorkerRng draws (a torch generator seeded with
    Energon's worker seed, one float32 per draw), and a counter restores any position,
    across blocks and backwards."""
    import torch

    energon = pytest.importorskip("megatron.energon")
    for rank, workers, worker in ((0, 0, 0), (1, 2, 1)):
        wc = energon.WorkerConfig(rank=rank, world_size=2, num_workers=workers, seed_offset=7)
        global_id = rank if workers == 0 else rank * workers + worker
        assert energon_worker_seed(global_id, 7) == wc.worker_seed(worker if workers else None)
    gen = torch.Generator()
    gen.manual_seed(energon_worker_seed(3, 42))
    expected = [torch.rand(1, generator=gen).item() for _ in range(40_000)]
    stream = TorchStreamRng(energon_worker_seed(3, 42))
    assert [stream.random() for _ in range(40_000)] == expected
    for position in (0, 16_383, 16_384, 33_000, 5):
        resumed = TorchStreamRng(energon_worker_seed(3, 42), counter=position)
        assert [resumed.random() for _ in range(100)] == expected[position : position + 100]
    stream.counter = 10  # moved back: replays from the seed
    assert stream.random() == expected[10]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 64, 100, 1000, 4097])
def test_permutation_is_a_bijection_and_vectorised_matches_scalar(n: int) -> None:
    perm = Permutation(n, 9, "slices", 0)
    scalar = [perm(i) for i in range(n)]
    assert sorted(scalar) == list(range(n))
    assert perm.many(np.arange(n)).tolist() == scalar
    if n > 10:
        assert scalar != list(range(n)) and scalar != [
            Permutation(n, 10, "slices", 0)(i) for i in range(n)
        ]
    with pytest.raises(IndexError):
        perm(n)


def test_mix_draws_spread() -> None:
    draws = mix_draws(derive_seed(1, "d"), np.arange(10_000)) % np.uint64(10)
    counts = np.bincount(draws.astype(np.int64), minlength=10)
    assert counts.min() > 900 and counts.max() < 1100
