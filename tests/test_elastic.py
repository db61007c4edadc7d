"""Elastic resume: states saved on one (ranks x workers) layout restored on another.

Ranks are simulated in one process (``WorkerConfig(rank, world_size)`` per loader, real
worker processes where the layout has them); every check is the union of what the old
layout delivered before the save and the new layout after it: every sample of the epoch
exactly once (with ``blend_epochized``: the epoch's quota exactly), whatever sat in shuffle,
packing or grouping buffers.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli, write_two_leaves

from energon_lite import (
    Sample,
    StateError,
    TaskEncoder,
    WorkerConfig,
    get_savable_loader,
    get_train_dataset,
    get_val_dataset,
)
from energon_lite.cli.main import main
from energon_lite.cli.state_file import read_state_file
from energon_lite.resume.elastic import redistribute
from energon_lite.state.codec import encode_state
from energon_lite.testing import take

A, B = 120, 80  # samples of the two leaves


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_two_leaves(tmp_path_factory.mktemp("elastic"), A, B)


@dataclass
class Packed(Sample):
    members: list[str] = field(default_factory=list)


class PackGroupEncoder(TaskEncoder):
    """Packs samples in pairs, then batches packs in buckets by the first member's parity."""

    def preencode_sample(self, sample: Any) -> Packed:
        return Packed.derive_from(sample, members=[sample.__key__])

    def select_samples_to_pack(self, samples: list[Packed]) -> list[list[Packed]]:
        return [samples[i : i + 2] for i in range(0, len(samples), 2)]

    def postencode_sample(self, sample: Packed) -> Packed:
        return sample

    def pack_selected_samples(self, samples: list[Packed]) -> Packed:
        return Packed.derive_from(samples[0], members=[m for s in samples for m in s.members])

    def batch_group_criterion(self, sample: Packed) -> tuple[str, int]:
        return ("even" if int(sample.members[0][1:]) % 2 == 0 else "odd"), 3

    def batch(self, samples: list[Packed]) -> dict[str, Any]:
        return {"members": [m for s in samples for m in s.members]}


class GenEncoder(TaskEncoder):
    """A generator encode_sample: three outputs per sample."""

    def encode_sample(self, sample: Any) -> Any:
        for n in range(3):
            yield Packed.derive_from(sample, members=[f"{sample.__key__}/{n}"])

    def batch(self, samples: list[Packed]) -> dict[str, Any]:
        return {"members": [m for s in samples for m in s.members]}


CHAINS: dict[str, dict[str, Any]] = {
    "shuffle": dict(path="a", shuffle_buffer_size=8),
    "weighted": dict(path="weighted", shuffle_buffer_size=8),
    "epochized": dict(path="epochized", shuffle_buffer_size=8),
    "pack_group": dict(path="a", shuffle_buffer_size=8, packing_buffer_size=6, te=PackGroupEncoder),
    "weighted_pack_group": dict(
        path="weighted", shuffle_buffer_size=4, packing_buffer_size=5, te=PackGroupEncoder
    ),
}


def loader(data: dict[str, Path], chain: str, rank: int, world: int, workers: int, **over: Any):
    options = {**CHAINS[chain], **over}
    te = options.pop("te", TaskEncoder)
    dealing = options.pop("dealing", "ranges")
    dataset = get_train_dataset(
        data[options.pop("path")],
        worker_config=WorkerConfig(rank, world, workers),
        batch_size=4,
        max_samples_per_sequence=5,
        repeat=options.pop("repeat", False),
        task_encoder=te(),
        **options,
    )
    dataset.pipeline.options.dealing = dealing  # "slices": a loader of the version before it
    return get_savable_loader(dataset)


def as_saved_before_dealing(states: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """States of a ``dealing="slices"`` loader as the version before the field wrote them."""
    from energon_lite.resume.levels import walk_states
    from energon_lite.state.codec import state_digest

    for state in states:
        for tree in state["workers"]:
            for level in walk_states(tree):
                if level.get("type") == "Reader":
                    assert level.pop("dealing") == "slices"
        state["digest"] = state_digest(state)
    return states


def keys(batch: Any) -> list[str]:
    return list(batch["members"] if isinstance(batch, dict) else batch.__key__)


def save_old(data, chain: str, world: int, workers: int, steps: list[int], **over: Any):
    """Each old rank delivers ``steps[rank]`` batches, then saves; (delivered, states).
    ``dealing="slices"``: states without the dealing field, as older versions saved them."""
    delivered, states = [], []
    for rank in range(world):
        old = loader(data, chain, rank, world, workers, **over)
        delivered += [k for batch in take(old, steps[rank % len(steps)]) for k in keys(batch)]
        states.append(old.save_state_rank())
        old.close()
    if over.get("dealing") == "slices":
        states = as_saved_before_dealing(states)
    return delivered, states


def rest_of_epoch(data, chain: str, states, world: int, workers: int, rank: int) -> list[str]:
    new = loader(data, chain, rank, world, workers)
    new.restore_state_global(states)
    out = [k for batch in new for k in keys(batch)]
    new.close()
    return out


def expected_epoch(chain: str) -> Counter:
    a = Counter(f"a{i:05d}" for i in range(A))
    if chain in ("shuffle", "pack_group"):
        return a
    return a + Counter(f"b{i:05d}" for i in range(B))


@pytest.mark.parametrize(
    ("chain", "old", "new", "steps"),
    [
        ("shuffle", (2, 2), (1, 3), [3, 5]),
        ("weighted", (1, 4), (2, 1), [7]),
        ("epochized", (4, 1), (3, 2), [2, 4, 1, 3]),
        ("pack_group", (2, 0), (2, 2), [2, 3]),
        ("shuffle", (1, 2), (4, 0), [6]),
        ("weighted_pack_group", (3, 2), (2, 2), [2, 1, 3]),
    ],
)
def test_every_sample_exactly_once_across_the_layout_change(data, chain, old, new, steps):
    before, states = save_old(data, chain, *old, steps)
    after = [k for rank in range(new[0]) for k in rest_of_epoch(data, chain, states, *new, rank)]
    delivered = Counter(before + after)
    assert before and after
    if chain == "epochized":  # all of a once, and exactly half of b (repetitions 0.5) once
        assert max(delivered.values()) == 1
        assert sum(1 for k in delivered if k[0] == "a") == A
        assert sum(1 for k in delivered if k[0] == "b") == B // 2
    else:
        assert delivered == expected_epoch(chain)


@pytest.mark.parametrize(
    ("chain", "old", "new", "steps"),
    [
        ("shuffle", (2, 2), (1, 3), [3, 5]),
        ("epochized", (4, 1), (3, 2), [2, 4, 1, 3]),
        ("weighted_pack_group", (3, 2), (2, 2), [2, 1, 3]),
    ],
)
def test_states_of_the_old_dealing_move_to_another_layout(data, chain, old, new, steps):
    """States saved before the ``dealing`` field (slice round robin) redistribute too: the
    new states keep that dealing, and every sample of the epoch comes exactly once."""
    before, states = save_old(data, chain, *old, steps, dealing="slices")
    moved = redistribute(states, new[0], new[1])
    assert {level.get("dealing") for level in _readers_of(moved)} == {"slices"}
    after = [k for rank in range(new[0]) for k in rest_of_epoch(data, chain, states, *new, rank)]
    delivered = Counter(before + after)
    assert before and after
    if chain == "epochized":
        assert max(delivered.values()) == 1
        assert sum(1 for k in delivered if k[0] == "a") == A
        assert sum(1 for k in delivered if k[0] == "b") == B // 2
    else:
        assert delivered == expected_epoch(chain)
    _, fresh = save_old(data, chain, *old, steps)
    assert {level.get("dealing") for level in _readers_of(redistribute(fresh, *new))} == {"ranges"}


def _readers_of(states: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from energon_lite.resume.levels import walk_states

    return [
        level
        for state in states
        for tree in state["workers"]
        for level in walk_states(tree)
        if level.get("type") == "Reader"
    ]


def test_buffered_samples_move_and_the_result_is_deterministic(data):
    _, states = save_old(data, "pack_group", 2, 1, [2, 3])
    buffered = {
        k[0]
        for state in states
        for level in _levels(state["workers"][0])
        for k in level.get("keys", []) + level.get("buffer", [])
    }
    assert buffered  # the save really had samples in the shuffle/packing buffers
    first, second = redistribute(states, 3, 1), redistribute(states, 3, 1)
    assert first == second
    streams = [rest_of_epoch(data, "pack_group", states, 3, 1, rank=1) for _ in range(2)]
    assert streams[0] == streams[1] and streams[0]


def _levels(state: Any) -> list[dict[str, Any]]:
    out = []
    while isinstance(state, dict):
        out.append(state)
        state = state.get("source")
    return out


def test_same_layout_is_unchanged_and_rank_restore_refuses_another_layout(data):
    _, states = save_old(data, "shuffle", 2, 0, [2, 3])
    same = loader(data, "shuffle", 1, 2, 0)
    same.restore_state_global(states)
    assert same.save_state_rank() == states[1]  # exactly the saved state, no redistribution
    other = loader(data, "shuffle", 0, 3, 0)
    with pytest.raises(StateError, match="world_size"):
        other.restore_state_rank(states[0])
    moved = redistribute(states, 3, 0)
    reader = _levels(moved[0]["workers"][0])[-1]  # Batch <- Encode <- ShuffleBuffer <- Reader
    assert reader["type"] == "Reader" and reader["left"]["segs"]
    other.restore_state_rank(moved[0])


def test_foreign_and_unsupported_states_are_refused(data):
    _, states = save_old(data, "shuffle", 2, 0, [2, 3])
    for over, name in (
        (dict(shuffle_buffer_size=4), "shuffle_buffer_size"),
        (dict(path="weighted"), "datasets"),
    ):
        foreign = loader(data, "shuffle", 0, 3, 0, **over)
        with pytest.raises(StateError, match=name):
            foreign.restore_state_global(states)
    with pytest.raises(StateError, match="rank order"):
        redistribute(states[::-1], 3, 0)
    with pytest.raises(StateError, match="world_size=2"):
        redistribute(states[:1], 3, 0)
    # a generator encode_sample part-way through its outputs cannot be split exactly
    gen = get_savable_loader(
        get_train_dataset(
            data["a"],
            worker_config=WorkerConfig(0, 1, 0),
            batch_size=4,
            shuffle_buffer_size=None,
            max_samples_per_sequence=5,
            repeat=False,
            task_encoder=GenEncoder(),
        )
    )
    take(gen, 1)  # 4 of a sample's 3 outputs: the second sample's generator is mid-way
    with pytest.raises(StateError, match="generator encode_sample"):
        redistribute([gen.save_state_rank()], 2, 0)
    val = get_savable_loader(
        get_val_dataset(
            data["a"], worker_config=WorkerConfig(0, 1, 0), batch_size=4, split_part="train"
        )
    )
    take(val, 1)
    with pytest.raises(StateError, match="validation"):
        redistribute([val.save_state_rank()], 2, 0)


def test_repeat_true_old_epochs_then_a_full_new_epoch(data):
    """Old rank 0 is in epoch 1, rank 1 still in epoch 0: each one's rest is delivered
    once, then every new rank starts epoch 2, which covers every sample exactly once."""
    over = dict(repeat=True, shuffle_buffer_size=None)
    before, states = [], []
    for rank, steps in ((0, 18), (1, 5)):  # 15 batches of 4 per rank and epoch
        old = loader(data, "shuffle", rank, 2, 0, **over)
        before += [
            (k, r.epoch) for b in take(old, steps) for k, r in zip(b.__key__, b.__restore_key__)
        ]
        states.append(old.save_state_rank())
    after = []
    for rank in range(3):
        new = loader(data, "shuffle", rank, 3, 0, **over)
        new.restore_state_global(states)
        for batch in take(new, 60):
            after += [(k, r.epoch) for k, r in zip(batch.__key__, batch.__restore_key__)]
            if after[-1][1] == 3:
                break
    by_epoch = Counter(e for _, e in before + after)
    seen = Counter(before + after)
    assert max(seen.values()) == 1  # nothing twice within an epoch
    assert by_epoch[0] == A  # rank 1's rest of epoch 0 came back exactly
    assert {k for k, e in seen if e == 2} == {f"a{i:05d}" for i in range(A)}
    assert by_epoch[1] == A // 2  # only old rank 0 was in epoch 1


def test_checkpoint_redist_cli_matches_in_process_restore(data, tmp_path, capsys):
    _, states = save_old(data, "weighted", 2, 1, [3, 2])
    ckpt, out = tmp_path / "ckpt", tmp_path / "ckpt3"
    ckpt.mkdir(parents=True)
    for rank, state in enumerate(states):
        (ckpt / f"state_rank_{rank}.msgpack").write_bytes(encode_state(state))
    argv = ["checkpoint", "redist", str(ckpt), "--world-size", "3", "--num-workers", "1"]
    assert main([*argv, "-o", str(out)]) == 0
    files = sorted(out.iterdir())
    assert [f.name for f in files] == [f"state_rank_{r}.msgpack" for r in range(3)]
    written = [read_state_file(f) for f in files]
    assert json.loads(json.dumps(written)) == json.loads(json.dumps(redistribute(states, 3, 1)))
    for rank in (0, 2):
        offline = loader(data, "weighted", rank, 3, 1)
        offline.restore_state_rank(written[rank])
        from_cli = [k for batch in offline for k in keys(batch)]
        offline.close()
        assert from_cli == rest_of_epoch(data, "weighted", states, 3, 1, rank)
    capsys.readouterr()
    assert main(["checkpoint", "info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "3 ranks x 1 workers" in text and "leftover" in text
    assert main(["checkpoint", "info", str(ckpt)]) == 0
    assert "buffered samples" in capsys.readouterr().out


def _gloo_rank(rank: int, world: int, path: str, port: int, out: str) -> None:
    import torch.distributed as dist

    from energon_lite.state.codec import decode_state

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        data = {"a": Path(path)}
        if world == 2:  # the old job: deliver some batches, save every rank on rank 0
            old = loader(data, "shuffle", rank, 2, 0)
            before = [k for batch in take(old, 3 + 2 * rank) for k in keys(batch)]
            states = old.save_state_global(global_dst_rank=0)
            if rank == 0:
                Path(out, "states.msgpack").write_bytes(encode_state(states))
            Path(out, f"before{rank}.json").write_text(json.dumps(before))
        else:  # the new job: only rank 0 reads the checkpoint
            states = decode_state(Path(out, "states.msgpack").read_bytes()) if rank == 0 else None
            new = loader(data, "shuffle", rank, 3, 0)
            new.restore_state_global(states, src_rank=0)
            after = [k for batch in new for k in keys(batch)]
            Path(out, f"after{rank}.json").write_text(json.dumps(after))
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(600)  # a hang guard only (a loaded machine is slow)
def test_gloo_two_ranks_save_three_ranks_restore(data, tmp_path):
    import socket

    import torch.multiprocessing as mp

    for world in (2, 3):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        mp.start_processes(
            _gloo_rank,
            args=(world, str(data["a"]), port, str(tmp_path)),
            nprocs=world,
            start_method="fork",
        )
    before = [k for r in range(2) for k in json.loads((tmp_path / f"before{r}.json").read_text())]
    after = [json.loads((tmp_path / f"after{r}.json").read_text()) for r in range(3)]
    assert all(after)  # every new rank got a share of the rest
    assert Counter(before + [k for rank in after for k in rank]) == expected_epoch("shuffle")


@pytest.mark.parametrize(("old", "new"), [((2, 2), (1, 4)), ((4, 1), (2, 2)), ((2, 0), (1, 2))])
def test_same_number_of_pipelines_moves_each_one_whole(data, old, new):
    """Energon's ``redist`` case, ranks x workers kept: every pipeline moves whole and goes on
    with its own stream, so each window of one batch per pipeline holds the same samples as
    when the old layout goes on (what Energon's own redist test compares)."""
    old_wpr, new_wpr = max(1, old[1]), max(1, new[1])
    states, old_after = [], []
    for rank in range(old[0]):
        before = loader(data, "shuffle", rank, *old)
        take(before, 2 * old_wpr)  # whole cycles over the rank's pipelines
        states.append(before.save_state_rank())
        old_after.append([keys(b) for b in take(before, 2 * old_wpr)])
        before.close()
    new_after = []
    for rank in range(new[0]):
        after = loader(data, "shuffle", rank, *new)
        after.restore_state_global(states)
        new_after.append([keys(b) for b in take(after, 2 * new_wpr)])
        after.close()

    def windows(batches: list[list[list[str]]], wpr: int) -> list[list[str]]:
        return [
            sorted(k for rank in batches for b in rank[c * wpr : (c + 1) * wpr] for k in b)
            for c in range(2)
        ]

    assert windows(new_after, new_wpr) == windows(old_after, old_wpr)
    assert all(len(window) == 4 * old[0] * old_wpr for window in windows(old_after, old_wpr))


def test_checkpoint_redist_takes_energons_form(data, tmp_path, capsys):
    """``redist --new-world-size N FILES... OUT`` (Energon's arguments): ranks x workers kept,
    the same states as restore_state_global; torch.save files in, torch.save files out."""
    import torch

    _, states = save_old(data, "shuffle", 2, 2, [4, 4])
    files = []
    for rank, state in enumerate(states):
        files.append(tmp_path / f"state_rank{rank}.pt")
        torch.save(state, files[-1])
    out = tmp_path / "redist"
    assert main(["checkpoint", "redist", "--new-world-size", "1", *map(str, files), str(out)]) == 0
    assert "2 ranks x 2 workers -> 1 ranks x 4 workers" in capsys.readouterr().out
    written = torch.load(out / "state_rank0.pt", weights_only=False)
    assert json.loads(json.dumps(written)) == json.loads(json.dumps(redistribute(states, 1, 4)[0]))
    assert main(["checkpoint", "redist", "--new-world-size", "3", *map(str, files), str(out)]) == 1
    assert "do not split evenly over 3 ranks" in capsys.readouterr().err
    assert main(["checkpoint", "redist", str(out)]) == 1
    assert "--world-size, --num-workers and -o" in capsys.readouterr().err


# states edited consistently (digest recomputed, as anyone holding the files can) ----------


def _reader(state: dict[str, Any], worker: int = 0) -> dict[str, Any]:
    return _levels(state["workers"][worker])[-1]


def _shuffle(state: dict[str, Any], worker: int = 0) -> dict[str, Any]:
    return next(lv for lv in _levels(state["workers"][worker]) if lv["type"] == "ShuffleBuffer")


def _next_past_end(states: list[dict[str, Any]]) -> None:
    _reader(states[0])["next"] = 50  # leaf a: 24 slices of 5, 12 per old worker


def _key_twice(states: list[dict[str, Any]]) -> None:
    _shuffle(states[1])["keys"][0] = list(_shuffle(states[0])["keys"][0])


def _slice_twice(states: list[dict[str, Any]]) -> None:
    _reader(states[1])["open"][0] = list(_reader(states[0])["open"][0])


def _position_before_its_slice(states: list[dict[str, Any]]) -> None:
    # leaf a: shards of 20, slices of 5, so slice s starts at sample 5 * (s % 4) of its shard
    entry = next(e for e in _reader(states[0])["open"] if e[0] % 4)
    entry[1] = 5 * (entry[0] % 4) - 1  # the last sample of the slice before: repeated


EDITS = {
    "next_past_end": (_next_past_end, "next slice 50 is past the 12 slices global worker 0"),
    "key_twice": (_key_twice, "hold sample .* twice: old rank 0 worker 0 .* old rank 1 worker 0"),
    "slice_twice": (_slice_twice, "open twice: in old rank 0 worker 0 and in old rank 1 worker 0"),
    "position_outside": (_position_before_its_slice, r"position \d+ outside slice \d+ \["),
}


def _edited(data, edit: str, dealing: str = "ranges") -> list[dict[str, Any]]:
    from energon_lite.state.codec import state_digest

    _, states = save_old(data, "shuffle", 2, 1, [3, 5], dealing=dealing)
    EDITS[edit][0](states)
    for state in states:
        state["digest"] = state_digest(state)
    return states


def _redist_cli(states, tmp_path: Path, *extra: str):
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    ckpt.mkdir(parents=True)
    for rank, state in enumerate(states):
        (ckpt / f"state_rank_{rank}.msgpack").write_bytes(encode_state(state))
    argv = ["checkpoint", "redist", str(ckpt), "--world-size", "3", "--num-workers", "1"]
    done = run_cli(*argv, "-o", str(out), *extra)
    return done, out


@pytest.mark.parametrize("dealing", ["ranges", "slices"])
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_elastic_restore_refuses_states_whose_work_overlaps_or_exceeds_the_plan(
    data, tmp_path, edit, dealing
):
    """Each old state passes its own checks; together they would repeat or lose samples
    (in both dealings: the plan checked is the one of the states' own dealing)."""
    states, match = _edited(data, edit, dealing), EDITS[edit][1]
    new = loader(data, "shuffle", 0, 3, 1)
    with pytest.raises(StateError, match=match):
        new.restore_state_global(states)
    if edit not in ("next_past_end", "position_outside"):  # the old layout: each rank alone
        same = loader(data, "shuffle", 1, 2, 1)
        with pytest.raises(StateError, match=match):
            same.restore_state_global(states)
    done, out = _redist_cli(states, tmp_path, "--dataset", str(data["a"]))
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        done.stderr.startswith("energon-lite checkpoint: error: ")
        and "Traceback" not in done.stderr
    )
    assert __import__("re").search(match, done.stderr), done.stderr
    assert not out.exists()


def test_redist_without_the_dataset_leaves_positions_to_the_restore(data, tmp_path):
    """Offline without ``--dataset`` the slice count is unknown: overlaps are still refused
    by redist, a ``next`` past the end by the reader when the new states are restored."""
    done, out = _redist_cli(_edited(data, "key_twice"), tmp_path / "a")
    assert done.returncode == 1 and "twice" in done.stderr and "--dataset PATH" in done.stderr
    done, out = _redist_cli(_edited(data, "next_past_end"), tmp_path / "b")
    assert done.returncode == 0, done.stderr
    new = loader(data, "shuffle", 0, 3, 1)
    new.restore_state_rank(read_state_file(out / "state_rank_0.msgpack"))
    with pytest.raises(StateError, match="next slice 50 is past the 12 slices"):
        take(new, 1)
    new.close()


@pytest.mark.parametrize("dealing", ["ranges", "slices"])
def test_redist_with_the_dataset_checks_and_matches_the_in_process_restore(data, tmp_path, dealing):
    _, states = save_old(data, "shuffle", 2, 1, [3, 5], dealing=dealing)
    done, out = _redist_cli(states, tmp_path, "--dataset", str(data["a"]))
    assert done.returncode == 0, done.stderr
    written = [read_state_file(out / f"state_rank_{r}.msgpack") for r in range(3)]
    assert json.loads(json.dumps(written)) == json.loads(json.dumps(redistribute(states, 3, 1)))
    before, _ = save_old(data, "shuffle", 2, 1, [3, 5], dealing=dealing)
    after = [k for rank in range(3) for k in rest_of_epoch(data, "shuffle", states, 3, 1, rank)]
    assert Counter(before + after) == expected_epoch("shuffle")
    other, _ = _redist_cli(states, tmp_path / "w", "--dataset", str(data["weighted"]))
    assert other.returncode == 1 and "not the states'" in other.stderr


def test_a_leaf_that_deals_a_slice_twice_per_epoch_is_not_refused_for_it(data, tmp_path):
    """With shuffle_over_epochs_multiplier 2 one epoch may deal a slice (and its samples)
    twice, so the same key in two old workers' buffers is not an overlap there."""
    yaml = tmp_path / "twice.yaml"
    yaml.write_text(
        "__module__: energon_lite\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        f"    path: {data['a']}\n    shuffle_over_epochs_multiplier: 2\n"
    )
    states = _edited({**data, "a": yaml}, "key_twice")
    new = loader({**data, "a": yaml}, "shuffle", 0, 3, 1)
    new.restore_state_global(states)  # accepted: this leaf's epoch may hold the key twice
    assert take(new, 1)
    new.close()
    with pytest.raises(StateError, match="twice"):  # the plain leaf refuses the same edit
        loader(data, "shuffle", 0, 3, 1).restore_state_global(_edited(data, "key_twice"))


def test_a_state_of_another_shape_is_named_by_the_restore_not_the_overlap_check(data):
    """The overlap check reads only what has the expected shape; a level missing its keys is
    the restore's shape check to name (a StateError, never a KeyError)."""
    from energon_lite.state.codec import state_digest

    _, states = save_old(data, "shuffle", 2, 1, [3, 5])
    del _shuffle(states[1])["keys"]
    states[1]["digest"] = state_digest(states[1])
    with pytest.raises(StateError, match="keys"):
        loader(data, "shuffle", 1, 2, 1).restore_state_global(states)
