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
    out, start = {}, 0
    for (name, _), end in zip(ratio, _ends(len(order), ratio)):
        out[name] = order[start:end]
        start = end
    return out


def _ends(num_shards: int, ratio: Sequence[tuple[str, float]]) -> list[int]:
    """Where each split's shards end: cumulative ratio boundaries in exact arithmetic."""
    fractions = [Fraction(r).limit_denominator(10**6) for _, r in ratio]
    total, cumulative, ends = sum(fractions), Fraction(0), []
    for part in fractions:
        cumulative += part
        ends.append(int(num_shards * cumulative / total))
    return ends


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


def _ratio_text(ratio: Sequence[tuple[str, float]]) -> str:
    return ",".join(f"{r:g}" for _, r in ratio)


def check_ratio_fills_splits(
    split_parts: dict[str, list[str]], ratio: Sequence[tuple[str, float]], num_shards: int
) -> None:
    """A split with a non-zero ratio that gets no whole shard is a ConfigError naming the fix:
    more, smaller shards (how many at least), another ratio, or ``--split-parts``."""
    empty = [name for name, r in ratio if r > 0 and not split_parts.get(name)]
    if not empty:
        return
    got = ", ".join(f"{name} {len(split_parts.get(name, []))}" for name, _ in ratio)

    def fills(n: int) -> bool:
        ends = _ends(n, ratio)
        return all(e > (ends[i - 1] if i else 0) for i, e in enumerate(ends) if ratio[i][1] > 0)

    needed = next((n for n in range(num_shards + 1, num_shards + 100_000) if fills(n)), None)
    more = f"{needed} already fill every split" if needed is not None else "many more"
    raise ConfigError(
        f"--split-ratio {_ratio_text(ratio)} over {num_shards} shard(s) leaves split "
        f"{' and '.join(repr(s) for s in empty)} empty (splits take whole shards: {got}). "
        f"Write the data into more, smaller shards ({more} of this ratio), choose another "
        "ratio (e.g. "
        + ",".join("1" for _ in ratio)
        + "), or choose shards per split with --split-parts"
    )
