"""The library's exception types and the bad-sample policy."""

from __future__ import annotations

import logging
import reprlib
from collections.abc import Callable
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


class TooManyFailuresError(EnergonLiteError, RuntimeError):
    """More consecutive samples failed than the failure tolerance allows."""


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 200
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 8
_SHORT.maxlevel = 3


def short_repr(value: Any, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters, for error messages about untrusted values."""
    text = _SHORT.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class WorkerTimeoutError(EnergonLiteError, RuntimeError):
    """A loader worker gave no batch within the timeout (``fail_on_timeout``)."""


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


SKIPPED = object()  # what guarded() returns when the call was skipped


def guarded(
    failures: FailureTracker,
    what: str,
    where: Callable[..., dict[str, Any]],
    fn: Callable[..., Any],
    *args: Any,
) -> Any:
    """``fn(*args)`` under the bad-sample policy: the result, or ``SKIPPED``.

    ``SkipSample`` skips silently; a ``ConfigError`` (a mistake in the setup, not in this
    sample) propagates at once; any other exception is logged with ``where(*args)`` (keys, shard)
    and counted, and raises ``TooManyFailuresError`` past the tolerance. A success resets
    the stage's failure streak.
    """
    try:
        result = fn(*args)
    except SkipSample:
        return SKIPPED
    except ConfigError:
        raise
    except Exception as exc:
        failures.failed(what, where(*args), exc)
        return SKIPPED
    failures.ok()
    return result
