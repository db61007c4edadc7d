"""The library's exception types, the bad-sample policy and Energon's error handlers.

Energon's handlers (``WorkerConfig(global_error_handler=..., restore_error_handler=...)``)
are called as ``handler(exception, sample_or_batch, sources)``: they may log and return (the
sample is skipped) or raise (the run stops).
"""

from __future__ import annotations

import dataclasses
import difflib
import errno
import logging
import reprlib
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

logger = logging.getLogger("energon_lite")


class EnergonLiteError(Exception):
    """Base class of every error energon_lite raises on purpose."""


class DatasetFormatError(EnergonLiteError, ValueError):
    """A prepared dataset, shard, index or YAML file is missing or malformed."""


class StateError(EnergonLiteError, ValueError):
    """A saved loader state does not belong to this loader, or is corrupt."""


class UnsavableStateError(StateError):
    """A state was asked for while a buffer holds items that a hook left without
    ``__restore_key__``: training runs (as in Energon), saving is refused."""


class ConfigError(EnergonLiteError, ValueError):
    """An argument or configuration value is invalid."""


class MediaDecodeError(EnergonLiteError, ValueError):
    """A media part (image, video, audio) could not be decoded, or a range is out of bounds."""


class RemoteStorageError(EnergonLiteError, OSError):
    """A remote store (S3, MSC, HTTP) failed a request for good: retries exhausted or refused."""


class TooManyFailuresError(EnergonLiteError, RuntimeError):
    """More consecutive samples failed than the failure tolerance allows."""


class MissingExtraError(ConfigError, ModuleNotFoundError):
    """An optional dependency is not installed; the message names the extra that installs it.

    Also a ``ModuleNotFoundError``, so ``except ImportError`` around an optional import still
    catches it."""


def missing_extra(
    module: str, extra: str, needed_by: str, package: str | None = None
) -> MissingExtraError:
    """The error for ``needed_by`` when ``module`` cannot be imported: names ``pip install
    'energon-lite[extra]'``. ``package``: the name users know it by, when not the module's.
    Raise it ``from`` the ImportError."""
    error = MissingExtraError(
        f"{needed_by} needs {package or module}, which is not installed: "
        f"pip install 'energon-lite[{extra}]'"
    )
    error.name = module
    return error


class _ShortRepr(reprlib.Repr):
    """``reprlib`` with tensors and arrays by shape, long bytes by length, dataclasses by field."""

    def repr1(self, x: Any, level: int) -> str:
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            return f"{type(x).__name__}(shape={tuple(x.shape)}, dtype={x.dtype})"
        if isinstance(x, (bytes, bytearray)) and len(x) > self.maxstring:
            return f"<{len(x)} bytes>"
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            if level <= 0:
                return f"{type(x).__name__}(...)"
            fields = dataclasses.fields(x)
            inner = ", ".join(
                f"{f.name}={self.repr1(getattr(x, f.name, None), level - 1)}"
                for f in fields[: self.maxdict]
            )
            more = ", ..." if len(fields) > self.maxdict else ""
            return f"{type(x).__name__}({inner}{more})"
        return super().repr1(x, level)


_SHORT = _ShortRepr()
_SHORT.maxlevel, _SHORT.maxdict, _SHORT.maxlist, _SHORT.maxtuple = 3, 4, 4, 4
_SHORT.maxset, _SHORT.maxfrozenset, _SHORT.maxdeque, _SHORT.maxarray = 4, 4, 4, 4
_SHORT.maxstring, _SHORT.maxlong, _SHORT.maxother = 60, 40, 60


def short_repr(value: Any, limit: int = 120) -> str:
    """``repr(value)`` for an error message about an untrusted value, bounded in time and length.

    Values from YAML files, tar headers or arguments can be attacker-sized (a billion-laughs
    alias chain, a 10⁵-digit number): only the first few items of each container, three
    levels deep, and at most ``limit`` characters are printed; never the whole value.
    Tensors and arrays show their shape and dtype, long bytes their length.
    """
    if isinstance(value, int) and value.bit_length() > 128:
        return f"<int of {value.bit_length()} bits>"
    try:
        text = _SHORT.repr(value)
    except Exception:  # a repr that raises (e.g. ints past sys.get_int_max_str_digits)
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class WorkerTimeoutError(EnergonLiteError, RuntimeError):
    """A loader worker gave no batch within the timeout (``fail_on_timeout``)."""


class WorkerRestartError(EnergonLiteError, RuntimeError):
    """A loader lost a worker and may not replace it (``max_worker_restarts`` spent)."""


def unknown_keys(keys: Iterable[Any], allowed: Sequence[str]) -> str | None:
    """A message naming every key not in ``allowed`` with the closest allowed one, or None.

    ``unknown key 'wieght' (did you mean 'weight'?); allowed: path, weight``. Checked before
    required keys, so a typo is named even when it also leaves a required key missing.
    """
    problems = []
    for key in keys:
        if key in allowed:
            continue
        close = difflib.get_close_matches(str(key), allowed, n=1) if isinstance(key, str) else []
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        problems.append(f"{short_repr(key, 60)}{hint}")
        if len(problems) == 5:
            break
    if not problems:
        return None
    plural = "s" if len(problems) > 1 else ""
    return f"unknown key{plural} {', '.join(problems)}; allowed: {', '.join(allowed)}"


class SkipSample(Exception):
    """Raise from a TaskEncoder hook to drop the current sample (or batch) silently."""


LOGGED_FAILURES = 3  # failures a tracker logs in full before it only counts them
MAX_SKIP_FRACTION = 0.01  # default of get_train_dataset/get_val_dataset(max_skip_fraction=)
SKIP_MIN_SAMPLES = 200  # samples a worker sees before its skip fraction is checked
SKIPS_SHOWN = 5  # skips a SkipBudget's summary names

_DISK_FULL = {errno.ENOSPC, errno.EDQUOT}


def is_infrastructure(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure of the machinery, not of one sample's bytes: a remote
    store whose retries are spent (``RemoteStorageError``) or a full disk. Such a failure is
    never skipped as a bad sample: it stops the run, naming what failed."""
    return isinstance(exc, RemoteStorageError) or (
        isinstance(exc, OSError) and exc.errno in _DISK_FULL
    )


class SkipBudget:
    """The skipped samples of one worker's chain over its whole pass, shared by every stage's
    :class:`FailureTracker`: unlike a tracker's streak, a success never resets it. Once the
    chain has seen ``min_samples`` samples, more than ``max_fraction`` of them skipped stops
    the run with ``TooManyFailuresError`` and a summary (skipped/seen, the first few keys and
    causes)."""

    __slots__ = ("first", "max_fraction", "min_samples", "seen", "skipped", "who")

    def __init__(
        self, max_fraction: float, who: str = "a worker", min_samples: int = SKIP_MIN_SAMPLES
    ) -> None:
        self.max_fraction, self.min_samples, self.who = max_fraction, min_samples, who
        self.seen = self.skipped = 0
        self.first: list[str] = []

    def skip(self, what: str, place: str, exc: BaseException) -> None:
        """Count one skip; ``TooManyFailuresError`` when the fraction is over its bound."""
        self.skipped += 1
        if len(self.first) < SKIPS_SHOWN:
            text = str(exc) if len(str(exc)) <= 200 else str(exc)[:197] + "..."
            self.first.append(f"{what} at {place}: {type(exc).__name__}: {text}")
        seen = max(self.seen, self.skipped)
        if seen >= self.min_samples and self.skipped > self.max_fraction * seen:
            raise TooManyFailuresError(
                f"{self.who} skipped {self.skipped} of {seen} samples this pass "
                f"({self.skipped / seen:.0%}; max_skip_fraction={self.max_fraction}, checked "
                f"from {self.min_samples} samples on): the data is broken, not a few samples. "
                f"First skips: {'; '.join(self.first)}"
            ) from exc


class FailureTracker:
    """Counts consecutive failures; logs the first few and raises past ``tolerance``.

    ``tolerance=0`` re-raises the first failure (strict mode, useful in tests).
    """

    __slots__ = ("budget", "consecutive", "handler", "tolerance", "total")

    def __init__(
        self,
        tolerance: int,
        handler: Callable[..., Any] | None = None,
        budget: SkipBudget | None = None,
    ) -> None:
        if tolerance < 0:
            raise ConfigError(f"{tolerance=} must be >= 0")
        self.tolerance = tolerance
        self.budget = budget  # the chain's skips over the whole pass (None: not counted)
        # Energon's WorkerConfig.global_error_handler: called as handler(exc, sample, sources)
        # for every failure, before counting; it may raise to stop the run (None: log a warning)
        self.handler = handler
        self.consecutive = 0
        self.total = 0

    def ok(self) -> None:
        self.consecutive = 0

    def saw(self) -> None:
        """One more sample entered the chain (the denominator of the pass's skip fraction)."""
        if self.budget is not None:
            self.budget.seen += 1

    def failed(
        self, what: str, where: dict[str, Any], exc: BaseException, sample: Any = None
    ) -> None:
        """Record a failure of ``what`` at ``where`` (key, shard...); raise when over tolerance.

        With a ``handler``, it is called first with ``(exc, sample, sample.__sources__)``;
        an exception it raises propagates (e.g. ``reraise_exception``)."""
        if self.handler is not None and isinstance(exc, Exception):
            self.handler(exc, sample, _sources_of(sample))
        self.consecutive += 1
        self.total += 1
        place = ", ".join(f"{k}={v!r}" for k, v in where.items())
        if self.consecutive > self.tolerance:
            raise TooManyFailuresError(
                f"{self.consecutive} consecutive failures (failure_tolerance={self.tolerance}); "
                f"last: {what} failed at {place}: {type(exc).__name__}: {exc}"
            ) from exc
        if self.budget is not None:
            self.budget.skip(what, place, exc)
        if self.handler is None:
            # the first few in full, then one line at 10, 100, 1000 ... failures: a bug in a
            # hook fails every sample, and hundreds of lines would hide the first one
            counted = self.total > LOGGED_FAILURES
            logged = not counted or str(self.total).rstrip("0") == "1"
            logger.log(
                logging.WARNING if logged else logging.DEBUG,
                "skipping: %s failed at %s: %s: %s%s",
                what, place, type(exc).__name__, exc,
                f" ({self.total} failures so far; logged: the first {LOGGED_FAILURES}, then "
                "each tenfold)" if counted else "",
            )  # fmt: skip


def _sources_of(sample: Any) -> Any:
    """``sample.__sources__`` (a list of SourceInfo), of a sample or of a raw dict; else None."""
    if isinstance(sample, dict):
        return sample.get("__sources__")
    return getattr(sample, "__sources__", None)


SKIPPED = object()  # what guarded() returns when the call was skipped


def guarded(
    failures: FailureTracker,
    what: str,
    where: Callable[..., dict[str, Any]],
    fn: Callable[..., Any],
    *args: Any,
    subject: Callable[[], Any] | None = None,
) -> Any:
    """``fn(*args)`` under the bad-sample policy: the result, or ``SKIPPED``.

    ``SkipSample`` skips silently; a ``ConfigError`` (a mistake in the setup, not in this
    sample) and an infrastructure failure (:func:`is_infrastructure`: a store whose retries
    are spent, a full disk) propagate at once; any other exception is logged with
    ``where(*args)`` (keys, shard) and counted, and raises ``TooManyFailuresError`` past the
    tolerance (a streak) or past the chain's :class:`SkipBudget` (the whole pass). A success resets
    the stage's failure streak. The failure tracker's handler gets ``subject()`` as the
    failed sample (default: the first argument).
    """
    try:
        result = fn(*args)
    except SkipSample:
        return SKIPPED
    except ConfigError:
        raise
    except Exception as exc:
        if is_infrastructure(exc):
            place = ", ".join(f"{k}={v!r}" for k, v in where(*args).items())
            logger.error(
                "stopping: %s failed at %s: %s: %s (the store or disk failed, not this "
                "sample: never skipped)", what, place, type(exc).__name__, exc,
            )  # fmt: skip
            raise
        item = subject() if subject is not None else (args[0] if args else None)
        failures.failed(what, where(*args), exc, item)
        return SKIPPED
    failures.ok()
    return result


# Energon's error handlers ---------------------------------------------------------------------


def log_exception(e: Exception, sample: Any, sources: Sequence[Any] | None = None) -> None:
    """Log ``e`` with its traceback, where the sample came from and a short view of it."""
    where = "; ".join(
        f"{s.dataset_path}[{s.index}] {s.shard_name}{tuple(s.file_names)!r}"
        for s in sources or ()
        if hasattr(s, "dataset_path")
    )
    logger.error(
        "sample failed: %s: %s%s\nsample: %s",
        type(e).__name__,
        e,
        f"\nsources: {where}" if where else "",
        short_repr(sample, 400),
        exc_info=(type(e), e, e.__traceback__),
    )


def reraise_exception(e: Exception, _sample: Any, _sources: Sequence[Any] | None = None) -> None:
    """Raise ``e`` again: the first failure stops the run."""
    raise e


# The handler of the restore running now, set only inside ``restoring`` (a ContextVar: per
# thread, undone on leaving): it reaches the buffers' refetch deep inside
# ``Stage.restore_state``, whose signature is the stage contract every user stage implements.
_RESTORE_HANDLER: ContextVar[Callable[..., Any] | None] = ContextVar(
    "energon_lite_restore_handler", default=None
)


def failure_trackers(
    tolerance: int,
    global_error_handler: Callable[..., Any] | None,
    max_skip_fraction: float | None = None,
    who: str = "a worker",
) -> Callable[..., FailureTracker]:
    """Makes a fresh :class:`FailureTracker` per stage (given the stage's user hook, if any) (a success in one stage must not reset
    another's failure streak), calling Energon's ``WorkerConfig.global_error_handler``; its
    default, :func:`log_exception`, is what a tracker without a handler does already. With
    ``max_skip_fraction``, the trackers of one call share one :class:`SkipBudget` (one
    worker's chain, ``who``)."""
    handler = None if global_error_handler is log_exception else global_error_handler
    budget = None if max_skip_fraction is None else SkipBudget(max_skip_fraction, who)

    def tracker(hook: Callable[..., Any] | None = None) -> FailureTracker:
        # a hook marked @stateless(failure_tolerance=n) has its own tolerance, Energon's
        # meaning: the n-th consecutive failure of that hook stops the run; 0 never does
        own = getattr(hook, "__failure_tolerance__", None)
        if own is not None:
            return FailureTracker(own - 1 if own else sys.maxsize, handler, budget)
        return FailureTracker(tolerance, handler, budget)

    return tracker


def check_skip_fraction(value: Any) -> None:
    """ConfigError unless ``value`` is a fraction in [0, 1] or None (not counted)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ConfigError(
            f"max_skip_fraction={short_repr(value)} must be a number in [0, 1] (or None: "
            "skips are then bounded only by failure_tolerance, in a row)"
        )


@contextmanager
def restoring(handler: Callable[..., Any] | None) -> Iterator[None]:
    """While a worker's chain restores its state, buffered items that fail to be fetched
    again go to ``handler`` (``WorkerConfig.restore_error_handler``; ``reraise_exception``,
    the default, and None raise)."""
    token = _RESTORE_HANDLER.set(None if handler is reraise_exception else handler)
    try:
        yield
    finally:
        _RESTORE_HANDLER.reset(token)


def current_restore_handler() -> Callable[..., Any] | None:
    """The handler set by :func:`restoring`, or None (raise)."""
    return _RESTORE_HANDLER.get()
