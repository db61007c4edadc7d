"""Seeded mutations of a real loader state: every edit is refused, and a forged state (digest
recomputed) fails only with energon_lite's own error types, never with an internal one."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import pytest

from energon_lite import EnergonLiteError, WorkerConfig, get_savable_loader, get_train_dataset
from energon_lite.errors import StateError
from energon_lite.state.codec import state_digest
from energon_lite.testing import item_identity, take

MUTATIONS = 300


def _loader(yaml: Path):
    return get_savable_loader(
        get_train_dataset(
            yaml,
            worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
            batch_size=4,
            shuffle_buffer_size=12,
            max_samples_per_sequence=10,
        )
    )


@pytest.fixture(scope="module")
def blend_yaml(train_ds: Path) -> Path:
    yaml = train_ds.parent / "fuzz_blend.yaml"
    yaml.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        f"    blend:\n      - weight: 2\n        path: {train_ds}\n"
        f"      - weight: 1\n        path: {train_ds}\n"
    )
    return yaml


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a nested state: dict keys and list indices."""
    places = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            places += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            places += _paths(value, (*prefix, index))
    return places


def _mutate(state: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    state = copy.deepcopy(state)
    path = rng.choice([p for p in _paths(state) if p and p[0] != "digest"])
    parent = state
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    value = parent[last]
    kind = rng.choice(["int", "delete", "duplicate", "type", "truncate"])
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        parent[last] = value + rng.choice([-7, -1, 1, 2, 1000])
    elif kind == "delete":
        del parent[last]
    elif kind == "duplicate" and isinstance(parent, list):
        parent.insert(last, copy.deepcopy(value))
    elif kind == "truncate" and isinstance(value, list) and value:
        del value[-1]
    else:
        parent[last] = rng.choice([None, "x", 3.5, [], {}, -1, True])
    return state


def test_state_mutations_are_refused_and_forgeries_fail_cleanly(blend_yaml: Path) -> None:
    loader = _loader(blend_yaml)
    take(loader, 5)
    state = loader.save_state_rank()
    expected = [item_identity(b) for b in take(loader, 2)]
    rng = random.Random(1234)
    forged_outcomes = {"refused": 0, "same": 0, "other stream": 0}
    for _ in range(MUTATIONS):
        mutated = _mutate(state, rng)
        if mutated == state:
            continue
        with pytest.raises(StateError):
            _loader(blend_yaml).restore_state_rank(mutated)
        # forged: the digest recomputed over the edit; only our own errors may come out
        mutated["digest"] = state_digest(mutated)
        resumed = _loader(blend_yaml)
        try:
            resumed.restore_state_rank(mutated)
            got = [item_identity(b) for b in take(resumed, 2)]
        except EnergonLiteError:
            forged_outcomes["refused"] += 1
            continue
        forged_outcomes["same" if got == expected else "other stream"] += 1
    assert forged_outcomes["refused"] > MUTATIONS // 2, forged_outcomes


# one rank's state edited consistently: what only the states taken together show -----------


def _levels(tree: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A worker's chain state by stage type (one level of each here)."""
    out = {}
    while isinstance(tree, dict):
        out[tree["type"]] = tree
        tree = tree.get("source")
    return out


def _key_twice_in_one_buffer(workers: list[Any]) -> None:
    keys = _levels(workers[0])["ShuffleBuffer"]["keys"]
    keys[1] = list(keys[0])


def _key_in_two_workers(workers: list[Any]) -> None:
    first = _levels(workers[0])["ShuffleBuffer"]["keys"][0]
    _levels(workers[1])["ShuffleBuffer"]["keys"][0] = list(first)


def _open_slice_twice(workers: list[Any]) -> None:
    opened = _levels(workers[0])["Reader"]["open"]
    opened[1] = list(opened[0])


def _overlapping_slices(workers: list[Any]) -> None:
    """Worker 1 reads the tail of a slice worker 0 has open, from an earlier position."""
    slice_id, position = _levels(workers[0])["Reader"]["open"][0]
    _levels(workers[1])["Reader"]["open"][0] = [slice_id, position - 1]


RANK_EDITS = {
    "key_twice_in_one_buffer": (_key_twice_in_one_buffer, "twice: old rank 0 worker 0 .* worker 0"),
    "key_in_two_workers": (_key_in_two_workers, "twice: old rank 0 worker 0 .* worker 1"),
    "open_slice_twice": (
        _open_slice_twice,
        "open twice: in old rank 0 worker 0 and in .* worker 0",
    ),
    "overlapping_slices": (
        _overlapping_slices,
        "open twice: in old rank 0 worker 0 and in .* worker 1",
    ),
}


@pytest.fixture(scope="module")
def two_worker_state(train_ds: Path) -> dict[str, Any]:
    loader = _two_workers(train_ds)
    take(loader, 5)
    state = loader.save_state_rank()
    loader.close()
    return state


def _two_workers(root: Path):
    return get_savable_loader(
        get_train_dataset(
            root,
            worker_config=WorkerConfig(rank=0, world_size=1, num_workers=2),
            batch_size=4,
            shuffle_buffer_size=12,
            max_samples_per_sequence=10,
        )
    )


@pytest.mark.parametrize("edit", sorted(RANK_EDITS))
def test_a_rank_state_that_would_repeat_samples_is_refused(train_ds, two_worker_state, edit):
    """Each worker's chain would restore on its own; the rank's workers together hold a
    sample or a slice twice. restore_state_rank refuses it as restore_state_global does."""
    state = copy.deepcopy(two_worker_state)
    change, match = RANK_EDITS[edit]
    change(state["workers"])
    state["digest"] = state_digest(state)
    for restore in ("restore_state_rank", "restore_state_global"):
        loader = _two_workers(train_ds)
        with pytest.raises(StateError, match=match):
            getattr(loader, restore)(state if restore == "restore_state_rank" else [state])
    untouched = _two_workers(train_ds)
    untouched.restore_state_rank(copy.deepcopy(two_worker_state))  # the check refuses no real state
    assert len(take(untouched, 2)) == 2
    untouched.close()


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        (
            "keys",
            _nested(5000),
            r"field workers\[1\]\.source\.source\.keys\[0\]\[0\].*nested deeper",
        ),
        ("rng", 10**40, r"field workers\[1\]\.source\.source\.rng: <int of 133 bits> is outside"),
    ],
)
def test_a_state_nested_too_deep_or_with_a_huge_counter_is_refused_naming_the_field(
    train_ds, two_worker_state, field, value, match
):
    """Python would raise RecursionError or msgpack OverflowError on such a state (while
    computing its digest, which any restore does first); the refusal names the field."""
    state = copy.deepcopy(two_worker_state)
    _levels(state["workers"][1])["ShuffleBuffer"][field] = value
    with pytest.raises(StateError, match=match):
        state_digest(state)  # a forger cannot compute a digest either
    for restore in ("restore_state_rank", "restore_state_global"):
        loader = _two_workers(train_ds)
        with pytest.raises(StateError, match=match):
            getattr(loader, restore)(state if restore == "restore_state_rank" else [state])
