"""``RemotePath``: a pathlib-like name for an object under ``s3://``, ``az://``, ``gs://``,
``msc://`` or ``http(s)://``.

Local paths stay ``pathlib.Path``; ``as_path`` turns a string or path-like into one of the
two. A ``RemotePath`` supports what the dataset code uses of ``pathlib.Path``: ``/``,
``name``, ``suffix``, ``stem``, ``parent``, ``with_name``, ``resolve`` and the I/O calls
``exists``, ``is_file``, ``is_dir``, ``read_bytes``, ``read_text`` (which go through
``energon_lite.storage.ops``). ``str()`` is the URL without user info or query string, so
a path can be printed in errors and logs without leaking a credential or a signature.

``storage_options`` (endpoint, credentials, profile...) ride along with the path, are
handed to the client library, and never appear in ``str``/``repr``; they take no part in
equality, so a dataset is the same dataset whichever credentials open it.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from energon_lite.errors import ConfigError, DatasetFormatError
from energon_lite.storage.dss import dss_target, is_dss

if TYPE_CHECKING:
    from typing_extensions import TypeIs

SCHEMES = ("s3", "az", "gs", "msc", "http", "https")


def is_url(value: object) -> bool:
    """True for a string (or RemotePath) naming an object under a remote scheme."""
    if isinstance(value, RemotePath):
        return True
    if not isinstance(value, str):
        return False
    scheme, sep, _ = value.partition("://")
    return bool(sep) and scheme.lower() in SCHEMES


class RemotePath:
    """An object or prefix in a remote store, e.g. ``s3://bucket/datasets/laion``."""

    __slots__ = ("_query", "_userinfo", "key", "netloc", "scheme", "storage_options")

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in SCHEMES or not parts.hostname:
            raise ConfigError(
                f"{redact_url(url)!r} is not a remote path; allowed: s3://bucket/prefix, "
                "az://container/prefix, gs://bucket/prefix, msc://profile/prefix, "
                "http(s)://host/path"
            )
        self.scheme = scheme
        host = parts.hostname if scheme in ("http", "https") else parts.netloc.rpartition("@")[2]
        self.netloc = f"{host}:{parts.port}" if scheme in ("http", "https") and parts.port else host
        self._userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
        self._query = parts.query
        self.key = posixpath.normpath(parts.path).strip("/") if parts.path.strip("/") else ""
        if self.key == ".":
            self.key = ""
        self.storage_options = dict(storage_options or {})

    def _with_key(self, key: str) -> RemotePath:
        new = object.__new__(RemotePath)
        new.scheme, new.netloc, new._userinfo = self.scheme, self.netloc, self._userinfo
        new._query = ""  # a query (signature) belongs to one object only
        new.key = key
        new.storage_options = self.storage_options
        return new

    # pure path operations ----------------------------------------------------------------

    def __truediv__(self, other: str | os.PathLike[str]) -> RemotePath:
        text = os.fspath(other)
        if is_url(text):
            return RemotePath(text, self.storage_options)
        joined = posixpath.normpath(posixpath.join("/" + self.key, text)).lstrip("/")
        return self._with_key("" if joined == "." else joined)

    @property
    def name(self) -> str:
        return posixpath.basename(self.key)

    @property
    def suffix(self) -> str:
        name = self.name
        dot = name.rfind(".")
        return name[dot:] if 0 < dot < len(name) - 1 else ""

    @property
    def stem(self) -> str:
        suffix = self.suffix
        return self.name[: -len(suffix)] if suffix else self.name

    @property
    def parent(self) -> RemotePath:
        return self._with_key(posixpath.dirname(self.key))

    def with_name(self, name: str) -> RemotePath:
        return self._with_key(posixpath.join(posixpath.dirname(self.key), name))

    def resolve(self) -> RemotePath:
        return self

    def relative_to(self, other: RemotePath) -> str:
        prefix = other.key + "/" if other.key else ""
        if (self.scheme, self.netloc) != (other.scheme, other.netloc) or not self.key.startswith(
            prefix
        ):
            raise ConfigError(f"{self} is not under {other}")
        return self.key[len(prefix) :]

    @property
    def url(self) -> str:
        """The full URL for the client library (user info and query string included)."""
        auth = self._userinfo + "@" if self._userinfo else ""
        query = "?" + self._query if self._query else ""
        return f"{self.scheme}://{auth}{self.netloc}/{self.key}{query}"

    def __str__(self) -> str:
        return f"{self.scheme}://{self.netloc}/{self.key}"

    def __repr__(self) -> str:
        return f"RemotePath({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemotePath) and (self.scheme, self.netloc, self.key) == (
            other.scheme,
            other.netloc,
            other.key,
        )

    def __hash__(self) -> int:
        return hash((self.scheme, self.netloc, self.key))

    def __reduce__(self) -> tuple[Any, ...]:
        return (RemotePath, (self.url, self.storage_options))

    # I/O (see ops.py) ------------------------------------------------------------------------

    def exists(self) -> bool:
        from energon_lite.storage import ops

        return ops.exists(self)

    def is_file(self) -> bool:
        from energon_lite.storage import ops

        return ops.is_file(self)

    def is_dir(self) -> bool:
        from energon_lite.storage import ops

        return ops.is_dir(self)

    def read_bytes(self) -> bytes:
        from energon_lite.storage import ops

        return ops.read_bytes(self)

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)


StoragePath = Path | RemotePath


def as_path(
    value: str | os.PathLike[str] | RemotePath, storage_options: Mapping[str, Any] | None = None
) -> StoragePath:
    """A ``RemotePath`` for a URL (or a RemotePath, kept), else a ``pathlib.Path``. An object
    with a ``__storage_path__()`` method (Energon's ``EPath``) gives its own."""
    to_storage = getattr(value, "__storage_path__", None)
    if to_storage is not None:
        value = to_storage()
    if isinstance(value, RemotePath):
        if storage_options:
            return RemotePath(value.url, {**value.storage_options, **storage_options})
        return value
    if isinstance(value, str) and is_dss(value):  # the dataset service's local cache
        value = dss_target(value)
    if isinstance(value, str) and is_url(value):
        return RemotePath(value, storage_options)
    return Path(value)


def is_remote(path: object) -> TypeIs[RemotePath]:
    """Whether ``path`` names an object in a remote store (reading it costs requests)."""
    return isinstance(path, RemotePath)


def join(base: StoragePath, name: str) -> StoragePath:
    """``name`` as a path written in a file under ``base`` (a metadataset's ``path:``): a URL
    stays that URL (under a remote ``base`` with its storage options), a ``dss://`` path is
    resolved, anything else is relative to ``base`` with ``..`` resolved."""
    if is_dss(name) or (is_url(name) and not isinstance(base, RemotePath)):
        return as_path(name)
    return (base / name).resolve()


def inside(folder: StoragePath, name: str) -> StoragePath:
    """The file ``name`` inside ``folder``; a name that leaves it (``..``, an absolute path, a
    link pointing out, a URL) is refused, naming both."""
    if isinstance(folder, RemotePath):
        parts = PurePosixPath(name).parts
        if not name or name.startswith("/") or ".." in parts or "://" in name:
            raise DatasetFormatError(f"{folder}: file name {name!r} leaves the folder")
        return folder / name
    path = (folder / name).resolve()
    if not path.is_relative_to(folder):
        raise DatasetFormatError(f"{folder}: file name {name!r} leaves the folder")
    return path


def relative(path: StoragePath, base: StoragePath) -> str:
    """``path`` relative to ``base``, as a POSIX string (both local or both remote)."""
    if isinstance(path, RemotePath) and isinstance(base, RemotePath):
        return path.relative_to(base)
    return str(PurePosixPath(str(path)).relative_to(str(base)))


def url_joiner(base: StoragePath) -> Callable[[str, str], str]:
    """How to join a folder's text and a file name under ``base``, as strings, fast (no
    pathlib per call): ``os.path.join`` locally; under a URL a URL or absolute path is kept."""
    return _join_url if isinstance(base, RemotePath) else os.path.join


def _join_url(base: str, path: str) -> str:
    if is_url(path) or path.startswith("/"):
        return path
    scheme, _, rest = base.partition("://")
    return f"{scheme}://{posixpath.normpath(posixpath.join(rest, path))}"


def local_only(path: StoragePath, what: str) -> Path:
    """``path`` if it is local; remote stores hold prepared tar folders only, so JSONL,
    joins, ``aux:`` and reading by file name (cache pool, cookers) refuse them."""
    if isinstance(path, RemotePath):
        raise ConfigError(f"{path}: {what} needs a local path; remote stores are read as prepared tar folders only")  # fmt: skip
    return path


def redact_url(text: str) -> str:
    """A URL without user info and query string (where signatures and tokens live)."""
    try:
        parts = urlsplit(text)
    except ValueError:
        return "<unparsable url>"
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}{parts.path}" if parts.scheme else text.split("?", 1)[0]
