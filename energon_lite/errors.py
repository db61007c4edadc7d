"""The library's exception types and the bad-sample policy."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("energon_lite")


class EnergonLiteError(Exception):
    """Base class of every error energon_lite raises on purpose."""


class DatasetFormatError(EnergonLiteError, ValueError):
    """A prepared dataset, shard, index or YAML file is missing or malformed."""


class StateError(EnergonLiteError, ValueError):
    """A saved loader state does not belong to this loader, or is corrupt."""


class ConfigError(EnergonLiteError, ValueError):
    """An argument or configuration value is invalid."""


class MediaDecodeError(EnergonLiteError, ValueError):
    """A media part (image, video, audio) could not be decoded, or a range is out of bounds."""


class RemoteStorageError(EnergonLiteError, OSError):
    """A remote store (S3, MSC, HTTP) failed a request for good: retries exhausted or refused."""


class TooManyFailuresError(EnergonLiteError, RuntimeError):
    """More consecutive samples failed than the failure tolerance allows."""


class SkipSample(Exception):
    """Raise from a TaskEncoder hook to drop the current sample (or batch) silently."""


class FailureTracker:
    """Counts consecutive failures; logs each one and raises past ``tolerance``.

    ``tolerance=0`` re-raises the first failure (strict mode, useful in tests).
    """

    __slots__ = ("consecutive", "tolerance", "total")

    def __init__(self, tolerance: int) -> None:
        if tolerance < 0:
            raise ConfigError(f"{tolerance=} must be >= 0")
        self.tolerance = tolerance
        self.consecutive = 0
        self.total = 0

    def ok(self) -> None:
        self.consecutive = 0

    def failed(self, what: str, where: dict[str, Any], exc: BaseException) -> None:
        """Record a failure of ``what`` at ``where`` (key, shard...); raise when over tolerance."""
        self.consecutive += 1
        self.total += 1
        place = ", ".join(f"{k}={v!r}" for k, v in where.items())
        if self.consecutive > self.tolerance:
            raise TooManyFailuresError(
                f"{self.consecutive} consecutive failures (failure_tolerance={self.tolerance}); "
                f"last: {what} failed at {place}: {type(exc).__name__}: {exc}"
            ) from exc
        logger.warning("skipping: %s failed at %s: %s: %s", what, place, type(exc).__name__, exc)
