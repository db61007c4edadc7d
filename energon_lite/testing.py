"""Resume test helpers, shared by every stage and pipeline test (and usable by users).

``assert_stage_resumes`` saves a stage's state after every item, restores each state into a
fresh stage and checks that the rest of the stream is the same item for item: the same
``__key__``, the same ``__restore_key__`` and the same payload (tensors and arrays by their
bytes), run to the same end. Every state must have the same shape (the same nested keys and
value types) and travel through msgpack on the way, so a state that is not plain data, or
one whose layout drifts between steps, fails the check too.

``assert_elastic_resumes`` checks a stage's elastic restore (what its class declares for
:func:`energon_lite.resume.elastic.redistribute`): chains of it saved on one number of
workers continue on another, every sample of the epoch delivered exactly once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from energon_lite.resume.elastic import redistribute
from energon_lite.resume.rank_state import RankState
from energon_lite.samples.types import basic_sample_keys
from energon_lite.sources.base import Source
from energon_lite.stages.base import Stage
from energon_lite.stages.reader import Reader
from energon_lite.state.codec import decode_state, encode_state


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


def payload_digest(value: Any) -> str:
    """A digest of an item's content: tensors and arrays by dtype, shape and bytes;
    dataclasses, dicts and sequences by their fields; anything else by ``repr``."""
    digest = hashlib.blake2b(digest_size=12)
    _feed(digest, value)
    return digest.hexdigest()


def _feed(digest: Any, value: Any, depth: int = 0) -> None:
    if depth > 8:  # deep object graphs: their type is enough
        digest.update(type(value).__name__.encode())
        return
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch tensor
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        digest.update(f"nd{value.dtype}{value.shape}".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, (bytes, bytearray, memoryview)):
        digest.update(b"b")
        digest.update(bytes(value))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        digest.update(type(value).__name__.encode())
        for field in dataclasses.fields(value):
            digest.update(field.name.encode())
            _feed(digest, getattr(value, field.name), depth + 1)
    elif isinstance(value, dict):
        digest.update(b"{")
        for key in sorted(value, key=repr):
            digest.update(repr(key).encode())
            _feed(digest, value[key], depth + 1)
    elif isinstance(value, (list, tuple)):
        digest.update(f"[{len(value)}".encode())
        for element in value:
            _feed(digest, element, depth + 1)
    elif " at 0x" in (text := repr(value)):  # an object with an address in its repr
        digest.update(type(value).__name__.encode())
        if hasattr(value, "__dict__"):
            _feed(
                digest, {k: v for k, v in vars(value).items() if not k.startswith("_")}, depth + 1
            )
    else:
        digest.update(text.encode())


def item_identity(item: Any) -> tuple[Any, Any, str]:
    """``(__key__, __restore_key__, payload digest)``: what must match after a restore."""
    keys = basic_sample_keys(item) if not isinstance(item, (list, tuple)) else {}
    return item_keys(item), repr(keys.get("__restore_key__")), payload_digest(item)


def state_shape(state: Any) -> Any:
    """The layout of a state: nested dict keys and value types (lengths and values free)."""
    if isinstance(state, dict):
        return {key: state_shape(value) for key, value in state.items()}
    if isinstance(state, list):
        return "list"
    return type(state).__name__


def take(iterable: Iterable[Any], n: int | None) -> list[Any]:
    return list(iterable if n is None else itertools.islice(iterable, n))


def assert_stage_resumes(
    make_stage: Callable[[], Stage],
    num_items: int | None = None,
    *,
    every: int = 1,
    key: Callable[[Any], Any] = item_identity,
) -> list[Any]:
    """Check exact resume of a stage at every ``every``-th position of its first ``num_items`` items.

    ``num_items=None`` runs a finite stage to its end, and each resumed stream to its end
    too, so an extra item after a restore fails. Returns what ``key`` gave for each item.
    """
    stage = make_stage()
    reference: list[Any] = []
    first = stage.save_state()
    states: list[Any] = [encode_state(first)]
    shape = state_shape(first)
    items = iter(stage) if num_items is None else itertools.islice(iter(stage), num_items)
    for item in items:  # lazily: each state is taken right after its item
        reference.append(key(item))
        state = stage.save_state()
        if state_shape(state) != shape:
            raise AssertionError(
                f"the state's shape changed after item {len(reference) - 1}: "
                f"{state_shape(state)!r} != {shape!r}"
            )
        states.append(encode_state(state))
    if not reference:
        raise AssertionError("the stage produced no items; nothing to check")
    for position in range(0, len(reference) + 1, every):
        resumed = make_stage()
        resumed.restore_state(decode_state(states[position]))
        wanted = None if num_items is None else len(reference) - position
        rest = [key(item) for item in take(resumed, wanted)]
        if rest != reference[position:]:
            _diverged(f"resume after item {position}", position, rest, reference[position:])
    return reference


def _diverged(what: str, offset: int, got: list[Any], expected: list[Any]) -> None:
    first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), None)
    if first is None:  # one stream is a prefix of the other
        first = min(len(got), len(expected))
        raise AssertionError(
            f"{what}: {len(got)} items after the restore, expected {len(expected)}; first "
            f"difference at item {offset + first}: got {got[first : first + 2]!r}, "
            f"expected {expected[first : first + 2]!r}"
        )
    raise AssertionError(
        f"{what} diverged at item {offset + first}: got {got[first : first + 2]!r}, "
        f"expected {expected[first : first + 2]!r}"
    )


def assert_loader_resumes(
    make_loader: Callable[[], Any],
    total: int,
    save_points: Sequence[int],
    *,
    key: Callable[[Any], Any] = item_identity,
) -> list[Any]:
    """Check that a savable loader restored after ``p`` batches continues with batch ``p``.

    ``make_loader()`` builds a fresh loader with the same arguments. Also checks that the
    state survives msgpack. Returns what ``key`` gave for the first ``total`` batches.
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
    _close(loader)  # its workers would otherwise live (and prefetch) until it is collected
    for point in save_points:
        resumed = make_loader()
        resumed.restore_state_rank(decode_state(saved[point]))
        rest = [key(b) for b in take(resumed, total - point)]
        _close(resumed)
        if rest != reference[point:]:
            _diverged(f"loader resumed after batch {point}", point, rest, reference[point:])
    return reference


def assert_elastic_resumes(
    make_stage: Callable[[Reader], Stage],
    dataset: Source,
    old_workers: int,
    new_workers: int,
    steps: Sequence[int],
    **reader_options: Any,
) -> list[Any]:
    """Check an elastic restore of the chain ``make_stage(reader)`` over one epoch of ``dataset``.

    ``old_workers`` chains (one per global worker, readers from :func:`make_reader` with
    ``reader_options``) take ``steps[g]`` items each and save; ``redistribute`` deals their
    states to ``new_workers`` chains, which run to the end. Across both layouts every sample
    of the epoch must come out exactly once (by ``__key__``; a batch counts its samples).
    Returns the keys in delivery order: the old workers' items, then the new workers'.
    """
    if len(steps) != old_workers:
        raise ValueError(f"need one step count per old worker, got {len(steps)} for {old_workers}")
    if reader_options.get("repeat"):
        raise ValueError("the check runs one epoch: leave the readers' repeat False")

    def chain(worker: int, workers: int) -> Stage:
        reader = make_reader(dataset, worker_index=worker, num_workers=workers, **reader_options)
        return make_stage(reader)

    delivered: list[Any] = []
    saved = []
    for worker, count in enumerate(steps):
        stage = chain(worker, old_workers)
        stage.restore_state(None)
        delivered += _flat_keys(take(stage, count))
        saved.append(decode_state(encode_state(stage.save_state())))
    (new,) = redistribute([one_rank_state(saved)], 1, new_workers)
    for worker, worker_state in enumerate(new["workers"]):
        stage = chain(worker, new_workers)
        stage.restore_state(decode_state(encode_state(worker_state)))
        delivered += _flat_keys(stage)
    expected = Counter(_flat_keys(make_reader(dataset, **reader_options)))
    got = Counter(delivered)
    if got != expected:
        twice = sorted(key for key, n in got.items() if n > expected.get(key, 0))
        lost = sorted(key for key, n in expected.items() if n > got.get(key, 0))
        raise AssertionError(
            f"elastic restore from {old_workers} to {new_workers} workers after {list(steps)}: "
            f"{len(lost)} samples lost (first {lost[:3]!r}), {len(twice)} delivered too often "
            f"(first {twice[:3]!r})"
        )
    return delivered


def one_rank_state(workers: list[Any]) -> dict[str, Any]:
    """The loader state of a single rank whose workers' chains saved ``workers`` (one state
    per worker, in the first pass of a one-leaf training loader without repeat), digest
    included: what ``redistribute`` and ``energon-lite checkpoint`` read."""
    return RankState(
        config={
            "rank": 0,
            "world_size": 1,
            "num_workers": len(workers),
            "training": True,
            "blend_mode": "weighted",
            "repeat": False,
            "limit": None,
        },
        epoch=0,
        next_worker=0,
        workers=workers,
        in_pass=0,
    ).plain()


def _flat_keys(items: Iterable[Any]) -> list[Any]:
    keys: list[Any] = []
    for item in items:
        key = item_keys(item)
        keys += key if isinstance(key, list) else [key]
    return keys


def _close(loader: Any) -> None:
    close = getattr(loader, "close", None)
    if callable(close):
        close()


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
