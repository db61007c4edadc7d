"""``loader.metrics()``: the loader's figures as a flat dict of numbers, over the last window.

``loader.stats()`` counts from the first batch; a logger wants what happened since it last
looked. A :class:`MetricsWindow` keeps the previous reading of ``stats()`` and returns the
difference: every value is a float (a logger takes it as is: TensorBoard's ``add_scalar``,
W&B's ``log``, Lightning's ``log_dict``) and every name is stable (``docs/performance.md``,
"Metrics for your logger", lists them):

=============================================  =============================================
name                                           value over the window (since the last call)
=============================================  =============================================
``loader/batches``, ``loader/samples``         received by the trainer
``loader/samples_per_s``                       samples received per second of wall time
``loader/wait_ms_per_batch``                   the trainer's mean wait for a batch
``loader/wait_fraction``                       share of the window the trainer waited
``loader/stage/<stage>/time_share``            the stage's share of the workers' busy time
``loader/stage/<stage>/us_per_item``           its own time per item it handed out
``loader/stage/other/time_share``              busy time outside the stages (state, transport)
``loader/worker/<w>/busy_fraction``            share of the window worker ``w`` was working
``loader/buffer/<stage>/fill``                 a buffer's items held now over its capacity
``loader/cache/hits``, ``loader/cache/misses``  shard cache opens served from disk / fetched
``loader/remote/bytes``, ``loader/remote/requests``, ``loader/remote/retries``
                                               remote storage traffic of the workers
``loader/heals``                               worker pools replaced (``max_worker_restarts``)
``loader/mix/<i>/share``, ``loader/mix/<i>/target``
                                               blend source ``i``'s share of the samples
                                               delivered, and its target share now
=============================================  =============================================

``<stage>`` is the stage's row in ``stats()`` in lower case with ``_`` for spaces
(``reader``, ``reader_1``, ``shufflebuffer``, ``encode``, ``encode_sample``, ``batch``);
``<i>`` is the source's position in the metadataset. A window without a batch gives the
counts as 0 and leaves out the rates it has nothing to divide by.

Each value is kept as a :class:`Point` (a family, its labels, the value) as well, which is
what the Prometheus exporter (:mod:`energon_lite.loader.prometheus`) publishes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["MetricsWindow", "Point", "flat"]


@dataclass(frozen=True)
class Point:
    """One value: ``family`` is a name with ``{label}`` holes (``"stage/{stage}/time_share"``)."""

    family: str
    labels: tuple[tuple[str, str], ...]
    value: float

    @property
    def name(self) -> str:
        """The flat name: ``loader/`` + the family with its labels filled in."""
        return "loader/" + self.family.format(**dict(self.labels))


def flat(points: list[Point]) -> dict[str, float]:
    """``{name: value}`` of ``points``, in their order."""
    return {point.name: point.value for point in points}


def stage_label(name: str) -> str:
    """A stage's row name as a metric label: ``"Reader 1"`` -> ``"reader_1"``."""
    return re.sub(r"[^a-z0-9_]+", "_", name.lower().replace("#", "")).strip("_")


def _point(family: str, value: float, **labels: str) -> Point:
    return Point(family, tuple(labels.items()), float(value))


class MetricsWindow:
    """The difference between two readings of ``loader.stats()`` (see the module doc)."""

    def __init__(self) -> None:
        self._before: dict[str, Any] | None = None

    def take(self, stats: dict[str, Any]) -> list[Point]:
        """The points over the window ending at ``stats`` (a ``loader.stats()``); the next
        window starts here."""
        before, self._before = self._before, stats
        return list(_points(stats, before))


def _delta(now: float, before: float | None) -> float:
    return now - (before or 0)


def _points(now: dict[str, Any], before: dict[str, Any] | None) -> Any:
    was = before or {}
    batches = _delta(now["batches"], was.get("batches"))
    samples = _delta(now["samples"], was.get("samples"))
    elapsed = _delta(now["elapsed_s"], was.get("elapsed_s"))
    wait = _delta(now["wait_s"], was.get("wait_s"))
    yield _point("batches", batches)
    yield _point("samples", samples)
    if elapsed > 0:
        yield _point("samples_per_s", samples / elapsed)
        yield _point("wait_fraction", min(1.0, wait / elapsed))
    if batches > 0:
        yield _point("wait_ms_per_batch", 1e3 * wait / batches)
    yield from _stage_points(now, was)
    workers_before = {w["worker"]: w for w in was.get("workers", [])}
    for w in now["workers"]:
        old = workers_before.get(w["worker"], {})
        busy = _delta(w["busy_s"], old.get("busy_s"))
        wall = busy + _delta(w["idle_s"], old.get("idle_s"))
        if wall > 0:
            yield _point("worker/{worker}/busy_fraction", busy / wall, worker=str(w["worker"]))
    for stage in now["stages"]:
        if stage["capacity"]:
            fill = stage["held"] / stage["capacity"]
            yield _point("buffer/{stage}/fill", fill, stage=stage_label(stage["name"]))
    storage, storage_before = now.get("storage", {}), was.get("storage", {})
    for family, key in (
        ("cache/hits", "cache_hits"),
        ("cache/misses", "cache_misses"),
        ("remote/bytes", "bytes"),
        ("remote/requests", "requests"),
        ("remote/retries", "retries"),
    ):
        yield _point(family, _delta(storage.get(key, 0), storage_before.get(key)))
    heals = len(now.get("worker_restarts", []))
    yield _point("heals", _delta(heals, len(was.get("worker_restarts", []))))
    yield from _mix_points(now.get("mix"), was.get("mix"))


def _stage_points(now: dict[str, Any], was: dict[str, Any]) -> Any:
    old = {s["name"]: s for s in was.get("stages", [])}
    times = [(s, _delta(s["time_s"], old.get(s["name"], {}).get("time_s"))) for s in now["stages"]]
    other = _delta(now["other"]["time_s"], was.get("other", {}).get("time_s"))
    busy = sum(t for _, t in times) + other
    for stage, spent in times:
        label = stage_label(stage["name"])
        items = _delta(stage["items_out"], old.get(stage["name"], {}).get("items_out"))
        if busy > 0:
            yield _point("stage/{stage}/time_share", spent / busy, stage=label)
        if items > 0:
            yield _point("stage/{stage}/us_per_item", 1e6 * spent / items, stage=label)
    if busy > 0:
        yield _point("stage/{stage}/time_share", other / busy, stage="other")


def _mix_points(mix: dict[str, Any] | None, before: dict[str, Any] | None) -> Any:
    if mix is None:
        return
    old = before["sources"] if before is not None else [{} for _ in mix["sources"]]
    if len(old) != len(mix["sources"]):  # another blend (a restore): start over
        old = [{} for _ in mix["sources"]]
    drawn = [_delta(s["samples"], o.get("samples")) for s, o in zip(mix["sources"], old)]
    if any(d < 0 for d in drawn):  # an elastic restore starts the tallies again
        drawn = [float(s["samples"]) for s in mix["sources"]]
    total = sum(drawn)
    for i, source in enumerate(mix["sources"]):
        if total > 0:
            yield _point("mix/{source}/share", drawn[i] / total, source=str(i))
        yield _point("mix/{source}/target", source["target"], source=str(i))
