"""``state/upgrade.py``: every old form of a saved rank state read into today's form.

Each case feeds an old form through :func:`upgrade_state` (a compact version 3 unpacked
first, as every reader of states does): the committed golden states and hook-index states
(written by earlier releases), and forms built as the old code wrote them (counters
dropped, compact version 3). It checks exactly which fields the upgrade changed (by level
type and field: what was there before, what is there now), that the input is left as it
was, that an intact state is sealed again and an edited one is not, and that the versions
it does not read are refused by number.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from energon_lite import StateError, WorkerConfig, get_savable_loader, get_train_dataset
from energon_lite.state.codec import state_digest
from energon_lite.state.compact import packed, unpacked
from energon_lite.state.upgrade import upgrade_state

TESTS = Path(__file__).parent
MISSING = "<missing>"


def _read(relative: str) -> dict[str, Any]:
    return msgpack.unpackb((TESTS / relative).read_bytes(), raw=False, strict_map_key=False)


def _levels(level: Any) -> Iterator[dict[str, Any]]:
    while isinstance(level, dict):
        yield level
        for child in level.get("sources") or []:
            yield from _levels(child)
        level = level.get("source")


def _changes(before: Any, after: Any) -> set[tuple[str, str, Any, Any]]:
    """(where, field, old value, new value) of every field the upgrade set or changed:
    ``where`` is a level's type, or ``config`` for the loader's settings."""
    found: set[tuple[str, str, Any, Any]] = set()
    _config_changes(before["config"], after["config"], "", found)
    assert len(before["workers"]) == len(after["workers"])
    for old_tree, new_tree in zip(before["workers"], after["workers"]):
        old_levels, new_levels = list(_levels(old_tree)), list(_levels(new_tree))
        assert [lv["type"] for lv in old_levels] == [lv["type"] for lv in new_levels]
        for old, new in zip(old_levels, new_levels):
            for field in set(old) | set(new):
                if field in ("source", "sources"):
                    continue
                was, now = old.get(field, MISSING), new.get(field, MISSING)
                if was != now:
                    found.add((old["type"], field, _hashable(was), _hashable(now)))
    rest = set(before) | set(after)
    assert {k for k in rest if before.get(k) != after.get(k)} <= {"config", "workers", "digest"}
    return found


def _config_changes(old: Any, new: Any, where: str, found: set) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        assert set(old) == set(new)
        for key in old:
            _config_changes(old[key], new[key], f"{where}.{key}" if where else key, found)
    elif isinstance(old, list) and isinstance(new, list):
        assert len(old) == len(new)
        for item_old, item_new in zip(old, new):
            _config_changes(item_old, item_new, where, found)
    elif old != new:
        found.add(("config", where, old, new))


def _hashable(value: Any) -> Any:
    return repr(value) if isinstance(value, (list, dict)) else value


def _without(fields: dict[str, str]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A state as the release before ``fields`` (level type -> field) wrote it, digest and all."""

    def build(state: dict[str, Any]) -> dict[str, Any]:
        state = copy.deepcopy(state)
        for tree in state["workers"]:
            for level in _levels(tree):
                level.pop(fields.get(level["type"], ""), None)
        state["digest"] = state_digest(state)
        return state

    return build


def _packed_blend(state: dict[str, Any]) -> dict[str, Any]:
    """The weighted blend's readers packed in version 3 (the compact form)."""
    out = packed(state, lambda level: level.get("type") == "WeightedBlend")
    assert out["version"] == 3 and "pipelines" in out
    return out


DEALING = ("Reader", "dealing", MISSING, "slices")  # the global-slice dealing goes on
SEEDS = ("Encode", "seeds", MISSING, 1)  # hooks seeded from the restore key
OLD_BATCHER = "energon_lite.generic_collate.generic_batch"

# (case, the committed file, how the old form is made of it, the changes expected)
CASES: list[tuple[str, str, Callable[[dict[str, Any]], dict[str, Any]] | None, set]] = [
    ("single_folder", "golden_states/single_folder.msgpack", None, {DEALING, SEEDS}),
    ("weighted_blend", "golden_states/weighted_blend.msgpack", None, {DEALING, SEEDS}),
    ("epochized_blend", "golden_states/epochized_blend.msgpack", None, {DEALING, SEEDS}),
    ("packing_grouped", "golden_states/packing_grouped.msgpack", None, {DEALING, SEEDS}),
    (
        "batch_generic_batch",
        "golden_states/batch_generic_batch.msgpack",
        None,
        {DEALING, SEEDS, ("config", "batcher", OLD_BATCHER, "energon_lite.generic_batch")},
    ),
    (
        "mix_batch",
        "golden_states/mix_batch.msgpack",
        None,
        {
            DEALING,
            SEEDS,
            (
                "config",
                "batch_mix_fn",
                "energon_lite.generic_collate.homogeneous_concat_mix",
                "energon_lite.homogeneous_concat_mix",
            ),
            ("config", "datasets.datasets.batcher", OLD_BATCHER, "energon_lite.generic_batch"),
        },
    ),
    ("episodes", "golden_states/episodes.msgpack", None, set()),  # nothing old in it
    ("seeds_v1", "hook_index_states/seeds_v1.msgpack", None, {SEEDS}),
    ("seeds_v1_packed", "hook_index_states/seeds_v1_packed.msgpack", None, {SEEDS}),
    (
        "before_the_counters",
        "hook_index_states/seeds_v1.msgpack",
        _without({"Encode": "calls", "Batch": "batches"}),
        {SEEDS, ("Encode", "calls", MISSING, 0), ("Batch", "batches", MISSING, 0)},
    ),
    ("compact_v3", "golden_states/weighted_blend.msgpack", _packed_blend, {DEALING, SEEDS}),
]


@pytest.mark.parametrize(("case", "path", "make", "expected"), CASES, ids=[c[0] for c in CASES])
def test_each_old_form_reads_as_todays(case: str, path: str, make, expected: set) -> None:
    old = _read(path)
    if make is not None:
        old = make(old)
    kept = copy.deepcopy(old)
    base = unpacked(old)  # as every reader of states does first (version 3 -> 2)
    new = upgrade_state(base)
    assert old == kept and (base is old or base == unpacked(kept))  # nothing changed in place
    assert upgrade_state(base, strict=False) == new  # checkpoint info reads it the same
    assert new["version"] == 2
    assert _changes(base, new) == expected
    assert new["digest"] == state_digest(new)  # intact before: sealed again
    assert upgrade_state(new) is new  # today's form passes as it is


def test_an_edited_old_state_keeps_its_old_digest() -> None:
    """Upgrading does not bless an edit: the digest stays the saved one, which the loader's
    check then refuses."""
    state = _read("golden_states/single_folder.msgpack")
    state["epoch"] = 3
    new = upgrade_state(state)
    assert new is not state and new["workers"] != state["workers"]  # upgraded all the same
    assert new["digest"] == state["digest"] != state_digest(new)


@pytest.mark.parametrize(
    ("version", "said"),
    [
        (4, "version 4 was written by a newer energon_lite"),
        (17, "version 17 was written by a newer energon_lite"),
        (1, r"version 1 \(energon_lite 0.1, before 2026-11-23\) carries no digest"),
        ("2", "version '2' is unknown"),
        (None, "version None is unknown"),
        (True, "version True is unknown"),
    ],
)
def test_a_version_it_does_not_read_is_refused_by_number(version: Any, said: str) -> None:
    state = {**_read("golden_states/single_folder.msgpack"), "version": version}
    with pytest.raises(StateError, match=said):
        upgrade_state(state)
    assert upgrade_state(state, strict=False) is state  # described as it is (checkpoint info)


def test_a_compact_state_is_upgraded_once_unpacked() -> None:
    compact = _packed_blend(_read("golden_states/weighted_blend.msgpack"))
    with pytest.raises(StateError, match=r"version 3 \(compact pipelines\) is read unpacked"):
        upgrade_state(compact)


def test_what_is_not_a_rank_state_passes_for_its_reader_to_refuse() -> None:
    for value in (None, 7, [], {"type": "Reader"}, {"version": 2}):
        assert upgrade_state(value) is value


def test_a_future_state_is_refused_by_the_loader_naming_its_version(text_ds: Path) -> None:
    """The one place a rank state enters the loader refuses it before any check reads it."""
    loader = get_savable_loader(
        get_train_dataset(
            text_ds,
            worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
            batch_size=4,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
        )
    )
    state = loader.save_state_rank()
    assert upgrade_state(state) is state  # what save_state_rank writes today is today's form
    future = {**state, "version": 4, "something_new": [1, 2]}
    future["digest"] = state_digest(future)
    with pytest.raises(StateError, match="loader state version 4 was written by a newer"):
        loader.restore_state_rank(future)
