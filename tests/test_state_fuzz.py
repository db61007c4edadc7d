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
