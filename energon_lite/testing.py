"""Resume test helpers, shared by every stage and pipeline test (and usable by users).

``assert_stage_resumes`` saves a stage's state after every item, restores each state into a
fresh stage and checks that the rest of the stream is the same. States travel through
msgpack on the way, so a state that is not plain data fails the check too.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from energon_lite.reader import Reader
from energon_lite.source import Source
from energon_lite.stage import Stage
from energon_lite.state import decode_state, encode_state


def item_keys(item: Any) -> Any:
    """What identifies an item in a comparison: its ``__key__`` (list for batches), else itself."""
    if isinstance(item, dict) and "__key__" in item:
        return item["__key__"]
    key = getattr(item, "__key__", None)
    if key is not None:
        return key
    if isinstance(item, (tuple, list)):
        return [item_keys(x) for x in item]
    return item


def take(iterable: Iterable[Any], n: int | None) -> list[Any]:
    return list(iterable if n is None else itertools.islice(iterable, n))


def assert_stage_resumes(
    make_stage: Callable[[], Stage],
    num_items: int | None = None,
    *,
    every: int = 1,
    key: Callable[[Any], Any] = item_keys,
) -> list[Any]:
    """Check exact resume of a stage at every ``every``-th position of its first ``num_items`` items.

    Returns the reference keys. ``num_items=None`` runs a finite stage to its end.
    """
    stage = make_stage()
    reference: list[Any] = []
    states: list[Any] = [encode_state(stage.save_state())]
    items = iter(stage) if num_items is None else itertools.islice(iter(stage), num_items)
    for item in items:  # lazily: each state is taken right after its item
        reference.append(key(item))
        states.append(encode_state(stage.save_state()))
    if not reference:
        raise AssertionError("the stage produced no items; nothing to check")
    for position in range(0, len(reference) + 1, every):
        resumed = make_stage()
        resumed.restore_state(decode_state(states[position]))
        rest = [key(item) for item in take(resumed, len(reference) - position)]
        if rest != reference[position:]:
            first = (
                next(i for i, (a, b) in enumerate(zip(rest, reference[position:])) if a != b)
                if rest
                else 0
            )
            raise AssertionError(
                f"resume after item {position} diverged at item {position + first}: "
                f"got {rest[first : first + 3]!r}, expected {reference[position + first : position + first + 3]!r}"
            )
    return reference


def assert_loader_resumes(
    make_loader: Callable[[], Any],
    total: int,
    save_points: Sequence[int],
    *,
    key: Callable[[Any], Any] = item_keys,
) -> list[Any]:
    """Check that a savable loader restored after ``p`` batches continues with batch ``p``.

    ``make_loader()`` builds a fresh loader with the same arguments. Also checks that the
    state survives msgpack. Returns the reference keys of the first ``total`` batches.
    """
    loader = make_loader()
    reference, saved = [], {}
    iterator = iter(loader)
    for index in range(total + 1):
        if index in save_points:
            saved[index] = encode_state(loader.save_state_rank())
        if index == total:
            break
        reference.append(key(next(iterator)))
    del iterator
    for point in save_points:
        resumed = make_loader()
        resumed.restore_state_rank(decode_state(saved[point]))
        rest = [key(b) for b in take(resumed, total - point)]
        if rest != reference[point:]:
            raise AssertionError(
                f"loader resumed after batch {point} diverged: {rest[:2]!r} != {reference[point : point + 2]!r}"
            )
    return reference


def make_reader(dataset: Source, **options: Any) -> Reader:
    """A Reader of ``dataset`` as the only worker, for stage tests; ``options`` override
    the defaults (seed 0, shuffled slices of 10, two open slices, one epoch)."""
    settings: dict[str, Any] = {
        "leaf_id": 0,
        "seed": 0,
        "worker_index": 0,
        "num_workers": 1,
        "max_samples_per_sequence": 10,
        "shuffle": True,
        "repeat": False,
        "open_slices": 2,
    }
    settings.update(options)
    return Reader(dataset, **settings)
