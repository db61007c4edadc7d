"""Energon's error handlers for ``WorkerConfig(global_error_handler=..., restore_error_handler=...)``.

A handler is called as ``handler(exception, sample_or_batch, sources)``: it may log and return
(the sample is skipped) or raise (the run stops).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from energon_lite.errors import logger

_MAX_REPR = 400


def _short(value: Any) -> str:
    """A one-line description of a sample, tensors by shape, long values cut."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        inner = ", ".join(
            f"{f.name}={_short(getattr(value, f.name))}" for f in dataclasses.fields(value)
        )
        text = f"{type(value).__name__}({inner})"
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{k!r}: {_short(v)}" for k, v in value.items()) + "}"
    elif hasattr(value, "shape") and hasattr(value, "dtype"):
        text = f"{type(value).__name__}(shape={tuple(value.shape)}, dtype={value.dtype})"
    elif isinstance(value, (bytes, bytearray)):
        text = f"<{len(value)} bytes>"
    else:
        text = repr(value)
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 3] + "..."


def log_exception(exc: Exception, sample: Any, sources: Sequence[Any] | None = None) -> None:
    """Log ``exc`` with its traceback, where the sample came from and a short view of it."""
    where = "; ".join(
        f"{s.dataset_path}[{s.index}] {s.shard_name}{tuple(s.file_names)!r}"
        for s in sources or ()
        if hasattr(s, "dataset_path")
    )
    logger.error(
        "sample failed: %s: %s%s\nsample: %s",
        type(exc).__name__,
        exc,
        f"\nsources: {where}" if where else "",
        _short(sample),
        exc_info=(type(exc), exc, exc.__traceback__),
    )


def reraise_exception(exc: Exception, _sample: Any, _sources: Sequence[Any] | None = None) -> None:
    """Raise ``exc`` again: the first failure stops the run."""
    raise exc


_restore_handler: list[Callable[..., Any] | None] = [None]


@contextmanager
def restoring(handler: Callable[..., Any] | None) -> Iterator[None]:
    """While a worker's chain restores its state, buffered items that fail to be fetched
    again go to ``handler`` (``WorkerConfig.restore_error_handler``; ``reraise_exception``,
    the default, and None raise)."""
    previous = _restore_handler[0]
    _restore_handler[0] = None if handler is reraise_exception else handler
    try:
        yield
    finally:
        _restore_handler[0] = previous


def current_restore_handler() -> Callable[..., Any] | None:
    """The handler set by :func:`restoring`, or None (raise)."""
    return _restore_handler[0]
