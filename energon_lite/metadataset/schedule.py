"""Blend weights that change over a run: ``WeightSchedule`` and a leaf's share at a step.

A blend entry's ``weight`` is a number, a schedule (``{schedule: [[at, value], ...],
interpolate: linear | step}`` in YAML, ``WeightSchedule`` in code) or any callable
``weight_at(step) -> weight``. ``at`` counts the batches this loader has delivered (the
training step, the same on every rank). Before the first point the first value holds, after
the last point the last value holds; between two points ``linear`` interpolates and ``step``
keeps the earlier value.

A metadataset tree normalises weights per ``blend`` list and multiplies them down the tree;
with schedules that holds at every step: a leaf's weight at step ``t`` is the product over
its levels of ``weight(t) / sum of its siblings' weights(t)`` (``LeafShare``). Validation
names the entry: points sorted by ``at``, weights >= 0, and at every step some entry of a
list with a weight > 0 (checked at every point of every sibling's schedule, where the
piecewise-linear sum takes its smallest values).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import Any

from energon_lite.errors import ConfigError, short_repr

INTERPOLATIONS = ("linear", "step")
MAX_POINTS = 10_000  # a schedule's points; each is checked and searched, and siblings' are merged


class WeightSchedule:
    """A weight as ``[at, value]`` points over the training step (see the module docstring)."""

    __slots__ = ("ats", "interpolate", "values")

    def __init__(self, points: Sequence[Sequence[float]], interpolate: str = "linear") -> None:
        if interpolate not in INTERPOLATIONS:
            raise ConfigError(
                f"WeightSchedule: interpolate={short_repr(interpolate)}; allowed: "
                f"{list(INTERPOLATIONS)}"
            )
        if not isinstance(points, (list, tuple)) or not points:
            raise ConfigError(
                f"WeightSchedule: schedule {short_repr(points)} must be a non-empty list of "
                "[at, weight] points, e.g. [[0, 9], [2000, 1]]"
            )
        if len(points) > MAX_POINTS:
            raise ConfigError(
                f"WeightSchedule: {len(points):,} points; a schedule has at most {MAX_POINTS:,} "
                "(with interpolate: linear a few points describe a ramp)"
            )
        ats: list[int] = []
        values: list[float] = []
        for point in points:
            if not isinstance(point, (list, tuple)) or len(point) != 2:
                raise ConfigError(f"WeightSchedule: point {short_repr(point)} must be [at, weight]")
            at, value = point
            if isinstance(at, bool) or not isinstance(at, int) or at < 0:
                raise ConfigError(
                    f"WeightSchedule: point {short_repr(list(point))}: at must be a batch "
                    "count (an integer >= 0)"
                )
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(
                    f"WeightSchedule: point {short_repr(list(point))}: the weight must be a number"
                )
            if not math.isfinite(value) or value < 0:
                raise ConfigError(
                    f"WeightSchedule: point {short_repr(list(point))}: negative or infinite "
                    "weight; weights are finite and >= 0"
                )
            if ats and at <= ats[-1]:
                raise ConfigError(
                    f"WeightSchedule: points are not sorted by at: {at} after {ats[-1]}; list "
                    "them in increasing order of at"
                )
            ats.append(at)
            values.append(float(value))
        self.ats, self.values, self.interpolate = ats, values, interpolate

    def __call__(self, step: int) -> float:
        ats, values = self.ats, self.values
        i = bisect.bisect_right(ats, step)
        if i == 0:
            return values[0]
        if i == len(ats) or self.interpolate == "step":
            return values[i - 1]
        a0, a1 = ats[i - 1], ats[i]
        return values[i - 1] + (values[i] - values[i - 1]) * (step - a0) / (a1 - a0)

    def describe(self) -> list[Any]:
        """Plain data for a loader's fingerprint: the points and the interpolation."""
        return [[[a, v] for a, v in zip(self.ats, self.values)], self.interpolate]

    def __repr__(self) -> str:
        points = [[a, v] for a, v in zip(self.ats, self.values)]
        return f"WeightSchedule({points}, interpolate={self.interpolate!r})"


# a blend entry's weight: a number, a schedule or a user's weight_at(step) -> weight
Weight = float | Callable[[int], float]


def change_points(weight: Weight) -> list[int]:
    """Steps where a weight's slope may change (a schedule's points; none for a number
    or a user's callable, which is checked where it is evaluated)."""
    return list(weight.ats) if isinstance(weight, WeightSchedule) else []


def weight_at(weight: Weight, step: int) -> float:
    return weight(step) if callable(weight) else float(weight)


def check_siblings(weights: Sequence[Weight], where: str) -> None:
    """Some weight of a blend list is > 0 at every step (checked at every change point);
    ``where`` names the list in the error."""
    points = sorted({0, *(p for w in weights for p in change_points(w))})
    for step in points:
        if sum(weight_at(w, step) for w in weights) <= 0:
            raise ConfigError(
                f"{where}: every weight is 0 at step {step}; at every step at least one "
                "entry needs a weight > 0"
            )


class LeafShare:
    """A leaf's weight at a step: the product, over the levels above it, of its entry's
    weight over the sum of that list's weights (``levels``: (entry index, the list's
    weights) from the top)."""

    __slots__ = ("factor", "levels")

    def __init__(self, levels: Sequence[tuple[int, Sequence[Weight]]], factor: float = 1.0) -> None:
        self.levels = [(index, list(weights)) for index, weights in levels]
        self.factor = factor  # the product of the levels with fixed weights

    def __call__(self, step: int) -> float:
        share = self.factor
        for index, weights in self.levels:
            values = [weight_at(w, step) for w in weights]
            total = sum(values)
            if values[index] < 0 or not math.isfinite(total):
                raise ConfigError(
                    f"weight_at({step}) gave {values[index]} (of a total {total}) for blend "
                    f"entry {index}; weights are finite and >= 0"
                )
            if total <= 0:
                raise ConfigError(
                    f"every weight of a blend list is 0 at step {step}; at every step at "
                    "least one entry needs a weight > 0"
                )
            share *= values[index] / total
        return share

    def describe(self) -> list[Any]:
        """Plain data for a loader's fingerprint (a user's callable by its name)."""
        levels = [[index, [describe(w) for w in weights]] for index, weights in self.levels]
        return [self.factor, levels]


def describe(weight: Any) -> Any:
    """A weight as plain data: a number, a schedule's points, a callable's qualified name."""
    if weight is None or isinstance(weight, (int, float)):
        return weight
    if hasattr(weight, "describe"):
        return weight.describe()
    return f"{getattr(weight, '__module__', '?')}.{getattr(weight, '__qualname__', repr(weight))}"


def is_scheduled(weight: Any) -> bool:
    """Whether a leaf's weight changes with the step (anything but a plain number)."""
    if isinstance(weight, LeafShare):
        return any(callable(w) for _, ws in weight.levels for w in ws)
    return callable(weight)
