"""Retries with backoff for remote requests, and messages scrubbed of credentials.

A request that fails with a transient fault (HTTP 5xx, 429/throttling, a reset or refused
connection, a timeout, a truncated body) is retried up to ``attempts`` times with
exponential backoff and jitter; every retry is counted in ``STATS``. A missing object or
bucket is not retried: it becomes a ``DatasetFormatError`` naming the path. Anything else,
or a fault that outlasts the retries, becomes a ``RemoteStorageError`` naming the path and
the byte range. Messages pass through ``scrub``: no query string (signatures, tokens), no
user info and none of the configured secret values survive into an error or a log line.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from energon_lite.errors import DatasetFormatError, RemoteStorageError
from energon_lite.storage.session import RetryStats, session

logger = logging.getLogger("energon_lite.storage")
T = TypeVar("T")

_URL = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)([^/\s'\"]*@)?([^\s'\"?]*)(\?[^\s'\"]*)?")
_TRANSIENT_ERRNO = {errno.EBUSY, errno.EAGAIN, errno.ETIMEDOUT, errno.ECONNRESET,
                    errno.ECONNREFUSED, errno.ECONNABORTED, errno.EPIPE, errno.EREMOTEIO}  # fmt: skip
_TRANSIENT_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout",
                    "ServiceUnavailable", "InternalError", "RequestLimitExceeded", "503", "500"}  # fmt: skip
_MISSING_CODES = {"NoSuchKey", "NoSuchBucket", "404", "NotFound"}


class _SessionStats:
    """``STATS``: the counters of this process's storage session (``session.RetryStats``),
    looked up at each use, so a forked worker or a reset session counts in its own."""

    def __getattr__(self, name: str) -> Any:
        return getattr(session().stats, name)

    def __repr__(self) -> str:
        return repr(session().stats)


STATS = cast(RetryStats, _SessionStats())


@dataclass(frozen=True)
class RetryPolicy:
    """How often, and how far apart, a failed remote request is tried again."""

    attempts: int = 6  # ENERGON_LITE_REMOTE_ATTEMPTS overrides
    base_delay: float = 0.05
    max_delay: float = 2.0


POLICY = RetryPolicy()


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without URL user info, query strings, or any of ``secrets``."""
    text = _URL.sub(lambda m: m.group(1) + m.group(3), text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, "<redacted>")
    return text


def _chain(exc: BaseException) -> Iterable[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


class PreconditionFailed(Exception):
    """HTTP 412: a conditional request's ETag / date no longer matches the object."""


def precondition_failed(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a 412 / S3 ``PreconditionFailed``."""
    for item in _chain(exc):
        if isinstance(item, PreconditionFailed) or type(item).__name__ == "PreconditionFailedError":
            return True  # ours, or multi-storage-client's
        response = getattr(item, "response", None)  # botocore ClientError
        if isinstance(response, dict):
            code = str(response.get("Error", {}).get("Code", ""))
            status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            if code == "PreconditionFailed" or status == 412:
                return True
        if getattr(item, "status", None) == 412 and not isinstance(item, OSError):
            return True
        if getattr(item, "status_code", None) == 412:  # azure.core's HttpResponseError
            return True
    return False


def classify(exc: BaseException) -> str:
    """``"missing"``, ``"transient"`` or ``"permanent"``."""
    for item in _chain(exc):
        if isinstance(item, FileNotFoundError):
            return "missing"
        response = getattr(item, "response", None)  # botocore ClientError
        if isinstance(response, dict):
            code = str(response.get("Error", {}).get("Code", ""))
            status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            if code in _MISSING_CODES or status == 404:
                return "missing"
            if code in _TRANSIENT_CODES or status >= 500 or status == 429:
                return "transient"
        http_status = getattr(item, "status", None)  # aiohttp ClientResponseError
        if isinstance(http_status, int) and not isinstance(item, OSError):
            if http_status == 404:
                return "missing"
            if http_status >= 500 or http_status == 429:
                return "transient"
        # azure.core's HttpResponseError (status_code), gcsfs's HttpError (code)
        for value in (getattr(item, "status_code", None), getattr(item, "code", None)):
            if isinstance(value, int) and not isinstance(item, OSError):
                if value == 404:
                    return "missing"
                if value >= 500 or value in (408, 429):
                    return "transient"
        if isinstance(item, PermissionError):
            return "permanent"
        if isinstance(item, (TimeoutError, ConnectionError)):
            return "transient"
        if isinstance(item, OSError) and item.errno in _TRANSIENT_ERRNO:
            return "transient"
        name = type(item).__name__
        if name in ("ReadTimeoutError", "ConnectTimeoutError", "EndpointConnectionError",
                    "ConnectionClosedError", "HTTPClientError", "IncompleteRead",
                    "ResponseParserError", "ClientPayloadError", "ServerDisconnectedError",
                    "ClientConnectorError", "ClientOSError", "ServerTimeoutError",
                    "FSTimeoutError", "ContentLengthError", "ServiceRequestError",
                    "ServiceResponseError", "ServiceRequestTimeoutError",
                    "ServiceResponseTimeoutError", "IncompleteReadError",
                    # multi-storage-client's own judgment, when it translated the SDK's error
                    "RetryableError", "RustRetryableError"):  # fmt: skip
            return "transient"
    return "permanent"


def call(
    fn: Callable[[], T],
    what: str,
    where: str,
    secrets: Iterable[str] = (),
    policy: RetryPolicy = POLICY,
) -> T:
    """``fn()`` with retries on transient faults; errors name ``where`` (path, byte range)."""
    secrets = tuple(secrets)
    attempts = int(os.environ.get("ENERGON_LITE_REMOTE_ATTEMPTS", policy.attempts))
    for attempt in range(1, attempts + 1):
        STATS.add("requests")
        try:
            return fn()
        except DatasetFormatError:  # the data is wrong (a changed object): no retry helps
            raise
        except Exception as exc:
            kind = classify(exc)
            detail = scrub(f"{type(exc).__name__}: {exc}", secrets)
            if kind == "missing":
                raise DatasetFormatError(f"{where}: not found ({what})") from None
            if kind == "permanent" or attempt == attempts:
                STATS.add("failures")
                tries = f" after {attempt} attempts" if attempt > 1 else ""
                raise RemoteStorageError(f"{where}: {what} failed{tries}: {detail}") from None
            STATS.add("retries")
            delay = min(policy.max_delay, policy.base_delay * 2 ** (attempt - 1))
            delay *= 0.5 + session().jitter.random()  # workers do not retry in lockstep
            logger.info("retrying %s of %s (attempt %d): %s", what, where, attempt, detail)
            time.sleep(delay)
    raise AssertionError("unreachable")  # the loop returns or raises


def scrubbed(exc: BaseException, secrets: Iterable[str]) -> Any:
    """A short, credential-free description of an exception."""
    return scrub(f"{type(exc).__name__}: {exc}", secrets)
