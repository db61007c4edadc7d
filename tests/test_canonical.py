"""Canonical layouts: the same global batches on any layout whose ranks and workers divide it.

A run defined on 4 ranks x 4 workers (global batch 8: 2 per canonical rank) is compared
with today's plain 4 x 4 run, step by step: each global step's samples (the union of every
rank's batch) with their payloads, which carry per-sample randomness drawn in
``encode_sample``. Ranks are loaders in this process with real worker processes; the last
test moves two real gloo ranks to one.
"""

from __future__ import annotations

import copy
import json
import logging
import socket
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import pytest
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import write_two_leaves

from energon_lite import (
    ConfigError,
    Sample,
    StateError,
    TaskEncoder,
    WorkerConfig,
    get_savable_loader,
    get_train_dataset,
    prepare_dataset,
)
from energon_lite.cli.info import describe_state
from energon_lite.cli.main import main
from energon_lite.state.codec import encode_state
from energon_lite.synth.shards import write_captioning_shards
from energon_lite.testing import take

A, B = 120, 80  # samples of the two leaves
G = 8  # the global batch
CANONICAL = (4, 4)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_two_leaves(tmp_path_factory.mktemp("canonical"), A, B)


@dataclass
class Noisy(Sample):
    members: list[str] = field(default_factory=list)
    noise: float = 0.0


def noisy(te: TaskEncoder, sample: Any) -> Noisy:
    """Per-sample randomness (keyed by the sample's restore key) in the payload."""
    return Noisy.derive_from(sample, members=[sample.__key__], noise=te.sample_rng.random())


def items(samples: list[Noisy]) -> dict[str, Any]:
    return {"items": [(m, s.noise) for s in samples for m in s.members]}


class NoisyEncoder(TaskEncoder):
    def encode_sample(self, sample: Any) -> Noisy:
        return noisy(self, sample)

    def batch(self, samples: list[Noisy]) -> dict[str, Any]:
        return items(samples)


class BatchEncoder(NoisyEncoder):
    """An ``encode_batch`` too (it runs on a rank's joined batch)."""

    def encode_batch(self, batch: dict[str, Any]) -> dict[str, Any]:
        return {"items": [(key, round(noise, 6)) for key, noise in batch["items"]]}


class PackGroupEncoder(TaskEncoder):
    """Packs samples in pairs, then batches packs in buckets by the first member's parity
    (2 packs per canonical rank and bucket)."""

    def preencode_sample(self, sample: Any) -> Noisy:
        return noisy(self, sample)

    def batch(self, samples: list[Noisy]) -> dict[str, Any]:
        return items(samples)

    def select_samples_to_pack(self, samples: list[Noisy]) -> list[list[Noisy]]:
        return [samples[i : i + 2] for i in range(0, len(samples), 2)]

    def postencode_sample(self, sample: Noisy) -> Noisy:
        return sample

    def pack_selected_samples(self, samples: list[Noisy]) -> Noisy:
        return Noisy.derive_from(
            samples[0],
            members=[m for s in samples for m in s.members],
            noise=sum(s.noise for s in samples),
        )

    def batch_group_criterion(self, sample: Noisy) -> tuple[str, int]:
        return ("even" if int(sample.members[0][1:]) % 2 == 0 else "odd"), 2


SYNC = {"weights": {"even": 1, "odd": 1}}
CHAINS: dict[str, dict[str, Any]] = {
    "shuffle": dict(path="a", shuffle_buffer_size=8),
    "weighted": dict(path="weighted", shuffle_buffer_size=8, te=BatchEncoder),
    "epochized": dict(path="epochized", shuffle_buffer_size=4),
    "pack_group": dict(
        path="a",
        shuffle_buffer_size=8,
        packing_buffer_size=6,
        te=PackGroupEncoder,
        bucket_sync=SYNC,
    ),
}
LAYOUTS = [(1, 4), (2, 2), (4, 1), (2, 1), (1, 0)]


def loader(data, chain: str, rank: int, world: int, workers: int, canonical=CANONICAL, **over):
    options = {**CHAINS[chain], **over}
    te = options.pop("te", NoisyEncoder)
    dataset = get_train_dataset(
        data[options.pop("path")],
        worker_config=WorkerConfig(rank, world, workers),
        batch_size=options.pop("batch_size", G // world),
        max_samples_per_sequence=5,
        repeat=options.pop("repeat", True),
        task_encoder=te(),
        canonical_layout=canonical,
        **options,
    )
    return get_savable_loader(dataset)


def run(data, chain, layout, steps, states=None, **over):
    """Each global step's items (sorted (key, payload) pairs over all ranks), and every
    rank's state after the last step."""
    world, workers = layout
    loaders = [loader(data, chain, rank, world, workers, **over) for rank in range(world)]
    return global_steps(loaders, steps, states)


def global_steps(loaders, steps, states=None):
    """Restore every rank's loader from ``states`` (if given), take ``steps`` batches: each
    step's items over all ranks, sorted, and every rank's state after the last step."""
    if states is not None:
        for one in loaders:
            one.restore_state_global(states)
    per_rank = [[batch["items"] for batch in take(one, steps)] for one in loaders]
    saved = [one.save_state_rank() for one in loaders]
    for one in loaders:
        one.close()
    return [
        sorted(item for rank in per_rank for item in rank[step]) for step in range(steps)
    ], saved


_REFERENCE: dict[str, list[Any]] = {}


def reference(data, chain: str, steps: int) -> list[Any]:
    """Today's plain 4 x 4 run (no canonical layout): what every layout must reproduce."""
    if chain not in _REFERENCE:
        _REFERENCE[chain] = run(data, chain, (4, 4), 15, canonical=None)[0]
    assert steps <= 15
    return _REFERENCE[chain][:steps]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: f"{layout[0]}x{layout[1]}")
@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_a_dividing_layout_gives_the_canonical_global_batches(data, chain, layout):
    steps, _ = run(data, chain, layout, 12)
    expected = reference(data, chain, 12)
    assert all(len(step) >= G for step in expected)
    assert steps == expected  # same samples per step, same payloads (per-sample randomness)


@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_restores_between_layouts_continue_the_canonical_run(data, chain):
    first, states = run(data, chain, (4, 4), 5)
    second, states = run(data, chain, (2, 2), 4, states)  # batch_size 4 per rank now
    third, _ = run(data, chain, (1, 4), 6, states)  # and 8
    assert first + second + third == reference(data, chain, 15)


def test_the_canonical_layout_itself_is_todays_run_and_old_states_restore(data):
    """canonical_layout=(4, 4) on 4 x 4 is today's 4 x 4; a state saved without the option
    (a run started before it) continues as that canonical run on 2 x 2."""
    assert run(data, "shuffle", (4, 4), 6)[0] == reference(data, "shuffle", 6)
    first, plain_states = run(data, "shuffle", (4, 4), 5, canonical=None)
    assert all("canonical_layout" not in s["config"] for s in plain_states)
    rest, _ = run(data, "shuffle", (2, 2), 5, plain_states)
    assert first + rest == reference(data, "shuffle", 10)


def test_another_global_batch_size_is_refused(data):
    _, states = run(data, "shuffle", (2, 2), 3)
    other = loader(data, "shuffle", 0, 1, 4, batch_size=4)  # 1 x 4: global batch 4, not 8
    with pytest.raises(StateError, match=r"global batch of 4 per rank x 2 ranks = 8.*= 4"):
        other.restore_state_global(states)


def test_a_layout_that_does_not_divide_delivers_each_sample_once(data, caplog):
    """3 ranks: every sample once (today's redistribution), there and back to 2 x 2."""
    with caplog.at_level(logging.INFO, logger="energon_lite.loader.canonical"):
        loader(data, "shuffle", 0, 2, 2, repeat=False)
        assert "the global batches are the canonical layout's" in caplog.text
        caplog.clear()
        loader(data, "shuffle", 0, 3, 1, batch_size=2, repeat=False)
        assert "delivers every sample exactly once, in an order of its own" in caplog.text
    counts: Counter = Counter()

    def deliver(layout, steps, states, batch_size):
        world, workers = layout
        loaders = [
            loader(data, "shuffle", r, world, workers, repeat=False, batch_size=batch_size)
            for r in range(world)
        ]
        saved = []
        for one in loaders:
            if states is not None:
                one.restore_state_global(states)
            counts.update(k for b in take(one, steps) for k, _ in b["items"])
            saved.append(one.save_state_rank())
        return saved

    states = deliver((2, 2), 3, None, 4)
    with pytest.raises(StateError, match="global batch"):  # 3 ranks cannot keep 8
        deliver((3, 1), 2, states, 2)
    states = deliver((4, 1), 2, states, 2)  # canonical again: the same run continues
    assert sum(counts.values()) == 2 * 3 * 4 + 4 * 2 * 2
    deliver((8, 0), None, states, 1)  # 8 ranks do not divide 4: the rest of the epoch, once
    assert counts == Counter(f"a{i:05d}" for i in range(A))

    counts.clear()
    states = deliver((8, 0), 2, None, 1)  # a run started on a layout that does not divide
    # dealt onto the canonical pipelines: from there on any dividing layout continues alike
    assert (
        run(data, "shuffle", (2, 2), 3, states, repeat=False)[0]
        == run(data, "shuffle", (1, 4), 3, states, repeat=False)[0]
    )
    deliver((2, 2), None, states, 4)
    assert counts == Counter(f"a{i:05d}" for i in range(A))


def test_bad_options_are_named(data):
    with pytest.raises(ConfigError, match=r"canonical_layout=\(4, 0\) must be"):
        loader(data, "shuffle", 0, 1, 1, canonical=(4, 0))
    with pytest.raises(ConfigError, match="batch_size=3 per rank is a global batch of 6"):
        loader(data, "shuffle", 0, 2, 2, batch_size=3)
    with pytest.raises(ConfigError, match="set bucket_sync"):
        loader(data, "pack_group", 0, 2, 2, bucket_sync=None)


def test_the_state_stays_small(tmp_path):
    """32 x 32 = 1024 logical pipelines on 4 ranks x 2 workers: a few KB per rank."""
    write_captioning_shards(tmp_path, 2048, 256, image_size=(8, 8))
    prepare_dataset(
        tmp_path, split_ratio=[("train", 1)], sample_type="TextSample",
        field_map={"text": "txt"}, progress=False,
    )  # fmt: skip
    states = []
    for rank in range(4):
        dataset = get_train_dataset(
            tmp_path,
            worker_config=WorkerConfig(rank, 4, 2),
            batch_size=8,
            shuffle_buffer_size=None,
            max_samples_per_sequence=2,
            canonical_layout=(32, 32),
        )
        one = get_savable_loader(dataset)
        take(one, 3)
        states.append(one.save_state_rank())
        one.close()
    sizes = [len(msgpack.packb(state)) for state in states]
    assert max(sizes) < 64_000, sizes  # 256 pipelines per rank: about 110 bytes each
    summary = describe_state(states[0]).splitlines()  # `energon-lite checkpoint info`
    assert any("... and 120 more" in line for line in summary) and len(summary) < 80


def test_a_rank_state_restores_on_its_own_layout(data):
    one = loader(data, "weighted", 1, 2, 2)
    made = take(one, 3)
    state = one.save_state_rank()
    following = [b["items"] for b in take(one, 4)]
    one.close()
    again = loader(data, "weighted", 1, 2, 2)
    again.restore_state_rank(state)
    assert [b["items"] for b in take(again, 4)] == following
    assert made and len(again) > 0
    default = get_savable_loader(  # default batches carry their restore key
        get_train_dataset(
            data["a"],
            worker_config=WorkerConfig(0, 2, 2),
            batch_size=4,
            shuffle_buffer_size=8,
            max_samples_per_sequence=5,
            canonical_layout=CANONICAL,
        )
    )
    batch = take(default, 2)[1]
    assert default.restore_sample(batch.__restore_key__).__key__ == batch.__key__
    default.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _gloo_rank(rank: int, path: str, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        dataset = get_train_dataset(
            path,
            worker_config=WorkerConfig.default_worker_config(num_workers=1),
            batch_size=G // 2,
            shuffle_buffer_size=8,
            max_samples_per_sequence=5,
            task_encoder=NoisyEncoder(),
            canonical_layout=CANONICAL,
        )
        one = get_savable_loader(dataset)
        before = [b["items"] for b in take(one, 3)]
        states = one.save_state_global(global_dst_rank=0)
        after = [b["items"] for b in take(one, 4)]
        result = {"before": before, "after": after, "states": states}
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(600)  # a hang guard only (a loaded machine is slow)
def test_two_gloo_ranks_move_to_one_mid_epoch(data, tmp_path):
    path = str(data["a"])
    mp.start_processes(
        _gloo_rank, args=(path, _free_port(), str(tmp_path)), nprocs=2, start_method="fork"
    )
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    states = ranks[0]["states"]
    assert len(states) == 2 and ranks[1]["states"] is None
    alone = loader(data, "shuffle", 0, 1, 2)  # one rank, two workers, batch_size 8
    alone.restore_state_global(states)
    moved = [sorted(map(tuple, b["items"])) for b in take(alone, 4)]
    alone.close()
    both = [sorted(tuple(i) for r in ranks for i in r["after"][step]) for step in range(4)]
    assert moved == both
    assert [sorted(tuple(i) for r in ranks for i in r["before"][s]) for s in range(3)] + both == [
        [tuple(i) for i in step] for step in reference(data, "shuffle", 7)
    ]


def test_checkpoint_redist_sends_canonical_states_to_the_trainer(data, tmp_path, capsys):
    _, states = run(data, "shuffle", (2, 2), 2)
    (tmp_path / "ckpt").mkdir()
    for rank, state in enumerate(states):
        (tmp_path / "ckpt" / f"state_rank_{rank}.msgpack").write_bytes(encode_state(state))
    argv = ["checkpoint", "redist", str(tmp_path / "ckpt"), "--world-size", "1"]
    assert main([*argv, "--num-workers", "4", "-o", str(tmp_path / "out")]) == 1
    assert "canonical_layout=[4, 4]; pass them to loader.restore_state_global" in (
        capsys.readouterr().err
    )


# every blend kind, schedule and composition on every dividing layout -------------------------

RAMP = "{schedule: [[0, 9], [6, 1]], interpolate: linear}"
RAMP_BACK = "{schedule: [[0, 1], [6, 9]], interpolate: linear}"
BLENDS = {  # metadatasets over a and b: the blend kinds, schedules and compositions
    "weighted": None,
    "epochized": None,
    "scheduled": f"    blend:\n      - {{path: a, weight: {RAMP}}}\n"
    f"      - {{path: b, weight: {RAMP_BACK}}}\n",
    "stratified": "    batch_composition: stratified\n    blend:\n"
    "      - {path: a, weight: 2}\n      - {path: b, weight: 1}\n",
    "scheduled_stratified": f"    batch_composition: stratified\n    blend:\n"
    f"      - {{path: a, weight: {RAMP}}}\n      - {{path: b, weight: {RAMP_BACK}}}\n",
    "scheduled_per_source": f"    batch_composition: per_source\n    blend:\n"
    f"      - {{path: a, weight: {RAMP}}}\n      - {{path: b, weight: {RAMP_BACK}}}\n",
    "tokens": "    weight_unit: tokens\n    blend:\n"
    "      - {path: a, weight: 1}\n      - {path: b, weight: 1}\n",
}
SMALL = (2, 2)  # the canonical layout of these runs: global batch 8, 4 per pipeline


class CostEncoder(NoisyEncoder):
    """A sample's cost varies with its key (1 to 5 "tokens"), for ``weight_unit: tokens``;
    the payload is the batch index ``encode_sample`` sees (Energon's, the canonical run's)."""

    def encode_sample(self, sample: Any) -> Noisy:
        return Noisy.derive_from(
            sample, members=[sample.__key__], noise=float(self.current_batch_index)
        )

    def sample_cost(self, sample: Noisy) -> float:
        return 1.0 + int(sample.members[0][1:]) % 5


def blend_run(data, blend, layout, steps, states=None, canonical=SMALL):
    """Global steps' items (sorted over the ranks) of a blend on ``layout``, and the states."""
    path = data["a"].parent / f"{blend}.yaml"
    if BLENDS[blend] is not None and not path.exists():
        path.write_text(
            "__module__: energon_lite\n__class__: MetadatasetV2\nsplits:\n  train:\n"
            + BLENDS[blend]
        )
    world, workers = layout
    loaders = []
    for rank in range(world):
        dataset = get_train_dataset(
            path,
            worker_config=WorkerConfig(rank, world, workers),
            batch_size=G // world,
            shuffle_buffer_size=4,
            max_samples_per_sequence=5,
            task_encoder=CostEncoder(),
            canonical_layout=canonical,
        )
        loaders.append(get_savable_loader(dataset))
    return global_steps(loaders, steps, states)


_BLEND_START: dict[str, tuple[list[Any], list[Any], list[Any]]] = {}


def blend_start(data, blend: str) -> tuple[list[Any], list[Any], list[Any]]:
    """What the layouts of a blend start from, the same for each (run once per process, as
    ``reference``): today's 2 x 2 run (10 steps), and the canonical 2 x 2 run's first 3
    steps with its states (a copy each time: the cached one stays as it was saved)."""
    if blend not in _BLEND_START:
        expected, _ = blend_run(data, blend, SMALL, 10, canonical=None)
        first, states = blend_run(data, blend, SMALL, 3)
        _BLEND_START[blend] = (expected, first, states)
    expected, first, states = _BLEND_START[blend]
    return expected, first, copy.deepcopy(states)


@pytest.mark.parametrize("layout", [(1, 0), (1, 2), (2, 1)], ids=lambda x: f"{x[0]}x{x[1]}")
@pytest.mark.parametrize("blend", sorted(BLENDS))
def test_every_blend_keeps_the_canonical_batches_fresh_and_restored(data, blend, layout):
    """Today's 2 x 2 run is what every layout dividing (2, 2) gives, from the start and
    after a restore from 2 x 2 (and back)."""
    expected, first, states = blend_start(data, blend)
    assert blend_run(data, blend, layout, 10)[0] == expected
    second, states = blend_run(data, blend, layout, 4, states)
    third, _ = blend_run(data, blend, SMALL, 3, states)
    assert first + second + third == expected
