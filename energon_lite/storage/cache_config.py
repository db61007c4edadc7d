"""Which node-local shard cache a process uses: ``ShardCacheConfig``, from the loader API or
from ``ENERGON_LITE_CACHE_DIR`` / ``ENERGON_LITE_CACHE_LIMIT``.

The cache is off unless a byte limit is given (a cache without one would fill the disk):
``ENERGON_LITE_CACHE_LIMIT=200GB`` turns it on, in ``$ENERGON_LITE_CACHE_DIR/shards`` (the
folder that already holds the remote ``.tar.idx`` copies, ``~/.cache/energon_lite/remote`` by
default). ``get_train_dataset(..., shard_cache=ShardCacheConfig(folder, "200GB"))`` does the
same for one dataset, also in spawned worker processes (the dataset carries it), and wins
over the environment. Local datasets never use it.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from energon_lite.errors import ConfigError
from energon_lite.storage.session import session

logger = logging.getLogger("energon_lite.storage")
LIMIT_ENV = "ENERGON_LITE_CACHE_LIMIT"
PREFETCH_ENV = "ENERGON_LITE_CACHE_PREFETCH"
_UNITS = {"": 1, "B": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
          "KI": 1 << 10, "MI": 1 << 20, "GI": 1 << 30, "TI": 1 << 40}  # fmt: skip
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]I?)?B?\s*$", re.IGNORECASE)


def parse_size(value: int | str, what: str) -> int:
    """Bytes from ``1000``, ``"500MB"``, ``"200GB"``, ``"1.5GiB"`` (``what`` names the knob)."""
    if isinstance(value, bool):
        raise ConfigError(f"{what}={value!r}: a byte count such as 200GB or 500MiB")
    if isinstance(value, int):
        number = value
    else:
        match = _SIZE.match(str(value))
        if match is None:
            raise ConfigError(f"{what}={value!r}: a byte count such as 200GB or 500MiB")
        number = int(float(match.group(1)) * _UNITS[(match.group(2) or "").upper()])
    if number < 1:
        raise ConfigError(f"{what}={value!r}: must be at least 1 byte")
    return number


@dataclass(frozen=True)
class ShardCacheConfig:
    """A node-local cache of remote shard bytes: ``folder`` shared by every process of the
    node, at most ``limit`` bytes (least recently used entries evicted), each worker
    fetching at most ``prefetch`` bytes of its next shards ahead of use (default: a quarter
    of the limit, at most 2 GiB)."""

    folder: str | os.PathLike[str]
    limit: int | str
    prefetch: int | str | None = None

    def resolved(self) -> tuple[Path, int, int]:
        """``(folder, limit, prefetch)`` checked, in bytes."""
        limit = parse_size(self.limit, "shard cache limit")
        if self.prefetch is None:
            prefetch = min(limit // 4, 2 << 30)
        elif self.prefetch in (0, "0"):
            prefetch = 0
        else:
            prefetch = parse_size(self.prefetch, "shard cache prefetch")
        return Path(self.folder).expanduser(), limit, prefetch


def default_folder() -> Path:
    root = os.environ.get("ENERGON_LITE_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "energon_lite", "remote"
    )
    return Path(root)


def _tell_dir_alone() -> None:
    """ENERGON_LITE_CACHE_DIR without a limit: the shard cache stays off; say so, once."""
    if not session().tell_once("cache dir without a limit"):
        return
    logger.warning(
        "ENERGON_LITE_CACHE_DIR is set but ENERGON_LITE_CACHE_LIMIT is not: remote shards are "
        "not cached (the folder holds only the remote .tar.idx copies); set "
        "ENERGON_LITE_CACHE_LIMIT, e.g. 200GB, to cache them in %s",
        default_folder() / "shards",
    )


def from_environment() -> ShardCacheConfig | None:
    """The cache the environment asks for, or None (no ``ENERGON_LITE_CACHE_LIMIT``)."""
    limit = os.environ.get(LIMIT_ENV, "").strip()
    if not limit and os.environ.get("ENERGON_LITE_CACHE_DIR"):
        _tell_dir_alone()
    if not limit or limit.lower() in ("0", "off", "none"):
        return None
    parse_size(limit, LIMIT_ENV)  # the error names the variable
    prefetch = os.environ.get(PREFETCH_ENV, "").strip() or None
    if prefetch is not None and prefetch != "0":
        parse_size(prefetch, PREFETCH_ENV)
    return ShardCacheConfig(default_folder() / "shards", limit, prefetch)


def use(config: ShardCacheConfig | None) -> ShardCacheConfig | None:
    """Make ``config`` this process's cache and return the one chosen before; None returns to
    the environment's. (A loader's chain runs inside ``session().shard_cache(config)``,
    which chooses it for that chain's reads only.)"""
    held = session()
    previous, held.chosen = held.chosen, config
    return previous


def current() -> ShardCacheConfig | None:
    """The cache this process reads remote shards through, or None."""
    chosen = session().chosen
    return chosen if chosen is not None else from_environment()


def announce_shard_cache(config: ShardCacheConfig | None) -> None:
    """Log once per process and cache where remote shards are cached (or that they are not)."""
    chosen = config if config is not None else current()
    key = None
    if chosen is not None:
        folder, limit, _ = chosen.resolved()
        key = (str(folder), limit)
    announced = session().announced
    if key in announced:
        return
    announced.add(key)
    if key is None:
        logger.info(
            "remote shards are read without a local cache (set ENERGON_LITE_CACHE_LIMIT, "
            "e.g. 200GB, to keep them on this node's disk)"
        )
    else:
        logger.warning("remote shards are cached in %s (at most %d bytes)", *key)
