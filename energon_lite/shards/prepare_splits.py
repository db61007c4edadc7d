"""How ``prepare`` assigns whole shards to splits: by ratio or by regular expressions."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from fractions import Fraction

from energon_lite.errors import ConfigError
from energon_lite.shards.meta import expand


def split_by_ratio(
    shards: list[str], ratio: Sequence[tuple[str, float]], shuffle_seed: int | None
) -> dict[str, list[str]]:
    """Whole shards per split: cumulative ratio boundaries in exact arithmetic."""
    if not ratio or any(r < 0 for _, r in ratio) or sum(r for _, r in ratio) <= 0:
        raise ConfigError(f"split ratio {list(ratio)} needs non-negative parts with a positive sum")
    order = list(shards)
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(order)
    fractions = [Fraction(r).limit_denominator(10**6) for _, r in ratio]
    total = sum(fractions)
    out, cumulative, start = {}, Fraction(0), 0
    for (name, _), part in zip(ratio, fractions):
        cumulative += part
        end = int(len(order) * cumulative / total)
        out[name] = order[start:end]
        start = end
    return out


def split_by_patterns(
    shards: list[str], patterns: Sequence[tuple[str, str]]
) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, pattern in patterns:
        try:
            regexes = [re.compile(p) for p in expand(pattern)]
        except re.error as exc:
            raise ConfigError(f"--split-parts {name}:{pattern!r}: invalid regex: {exc}") from None
        out.setdefault(name, []).extend(s for s in shards if any(r.match(s) for r in regexes))
    return out
