"""``EPath``: Energon's path type (``megatron.energon.epathlib.EPath``) over energon_lite's
storage layer.

One type for local files and remote objects, with Energon's behaviour: a local path is made
absolute and ``..`` / ``.`` are resolved without touching the disk; ``/`` joins (an absolute
path or a URL on the right replaces the left, as in Energon); ``str()`` is the local path or
the URL; ``open`` (``r``, ``rb``, ``w``, ``wb``), ``read_text`` / ``read_bytes`` /
``write_text`` / ``write_bytes``, ``is_file``, ``is_dir``, ``size``, ``walk``, ``glob``,
``copy``, ``move``, ``unlink``, ``relative_to``, ``with_suffix``, ``parent``, ``name``.

URLs: ``msc://profile/...`` (the profile from MSC's config file, as the rest of energon_lite
reads it), ``msc://__filesystem__/...`` (MSC's local profile: a local path), ``file://...``,
``rclone://profile/...`` (Energon's deprecated alias of ``msc://``), and, beyond Energon,
``s3://bucket/...`` and ``http(s)://...`` (read-only). ``dss://NAME@VERSION/...`` (Energon's
dataset-service paths) name files of the local dataset cache, ``NVDATASET_CACHE_DIR`` (this
module's attribute when set, else the environment variable): the path keeps its ``dss://``
name (``str``, ``url``, ``/``, ``walk``, ``glob``, ``relative_to``) and reads the cache. Writes to a remote object are one PUT when the file closes;
``mkdir`` makes local folders (object stores have none).
"""

from __future__ import annotations

import functools
import io
import os
import posixpath
import shutil
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import IO, Any

from energon_lite.errors import ConfigError
from energon_lite.storage import is_remote, ops
from energon_lite.storage.dss import CACHE_ENV, PREFIX, dss_target, is_dss, split_dss
from energon_lite.storage.path import RemotePath, StoragePath, as_path, redact_url, relative

# MSC's reserved profile name for the local file system (Energon's DEFAULT_PROFILE_NAME)
DEFAULT_PROFILE_NAME = "__filesystem__"


class EPath:
    """A local path or remote URL that behaves like Energon's ``EPath``."""

    __slots__ = ("_dss", "_path")

    def __init__(self, initial_path: str | os.PathLike[str] | EPath | RemotePath) -> None:
        self._path: StoragePath
        self._dss: str | None = None  # "NAME@VERSION/inner" of a dss:// path
        if isinstance(initial_path, EPath):
            self._path, self._dss = initial_path._path, initial_path._dss
        elif is_dss(initial_path):
            name, version, inner = split_dss(str(initial_path))
            self._dss = f"{name}@{version}" + (f"/{inner}" if inner else "")
            cache = None if NVDATASET_CACHE_DIR is None else str(NVDATASET_CACHE_DIR)
            self._path = as_path(dss_target(str(initial_path), cache))
        elif is_remote(initial_path):
            self._path = as_path(initial_path)
        elif isinstance(initial_path, str) and "://" in initial_path:
            self._path = _from_url(initial_path)
        else:
            self._path = _absolute(os.fspath(initial_path))

    @classmethod
    def _of(cls, path: StoragePath, dss: str | None = None) -> EPath:
        new = object.__new__(cls)
        new._path, new._dss = path, dss
        return new

    def __reduce__(self) -> tuple[Any, ...]:
        # A worker sends its dataset's path with every batch (in the batch's ``__sources__``):
        # a local path is rebuilt from its string, once per process (``_local``), not parsed
        # again by pathlib for each batch
        if self._dss is None and type(self._path) is _LOCAL_TYPE and type(self) is EPath:
            return (_local, (str(self._path),))
        return (EPath._of, (self._path, self._dss))

    def __storage_path__(self) -> StoragePath:
        """The ``pathlib.Path`` or ``RemotePath`` the rest of energon_lite reads."""
        return self._path

    # names -----------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._dss.rsplit("/", 1)[-1] if self._dss is not None else self._path.name

    @property
    def display_name(self) -> str:
        """The dataset (``NAME@VERSION``) of a dss:// path, else the name."""
        return self._dss.split("/", 1)[0] if self._dss is not None else self.name

    @property
    def parent(self) -> EPath:
        if self._dss is not None and "/" in self._dss:
            return EPath._of(self._path.parent, self._dss.rsplit("/", 1)[0])
        return EPath._of(self._path.parent)

    @property
    def url(self) -> str:
        """The local path, or the URL without user info or query string."""
        if self._dss is not None:
            return PREFIX + self._dss
        return str(self._path)

    def with_suffix(self, suffix: str) -> EPath:
        name = self.name
        stem = name[: name.rfind(".")] if "." in name.strip(".") else name
        if self._dss is not None:
            return self.parent / (stem + suffix)
        return EPath._of(self._path.with_name(stem + suffix))

    def relative_to(self, other: EPath) -> str:
        if (self._dss is None) != (other._dss is None):
            raise ValueError(f"{self} and {other}: only one is a dss:// path")
        if self._dss is not None and other._dss is not None:
            return str(PurePosixPath("/" + self._dss).relative_to("/" + other._dss))
        if self.is_local() != other.is_local():
            raise ValueError(f"{self} and {other} are not on the same file system")
        return relative(self._path, other._path)

    def __truediv__(self, other: str | EPath) -> EPath:
        if isinstance(other, EPath):
            return other  # Energon: an EPath is always absolute
        if other.startswith("/") or "://" in other:
            return EPath(other)
        if self._dss is not None:
            name, version, inner = split_dss(f"{PREFIX}{self._dss}/{other}")
            root = self._path  # the dataset's folder in the cache: up by the inner depth
            for _ in range(self._dss.count("/")):
                root = root.parent
            dss = f"{name}@{version}" + (f"/{inner}" if inner else "")
            return EPath._of(root / inner if inner else root, dss)
        if not self.is_local():
            return EPath._of(self._path / other)
        return EPath._of(_absolute(posixpath.join(str(self._path), other)))

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"EPath({str(self)!r})"

    def __fspath__(self) -> str:
        if not self.is_local():
            raise TypeError(f"{self} is a remote object, not a local file system path")
        return str(self._path)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EPath) and (self._path, self._dss) == (other._path, other._dss)

    def __hash__(self) -> int:
        return hash((self._path, self._dss))

    def __lt__(self, other: EPath) -> bool:
        if self.is_local() != other.is_local():
            raise ValueError(f"cannot order {self} and {other}: not on the same file system")
        return str(self) < str(other)

    # file system -----------------------------------------------------------------------

    def is_local(self) -> bool:
        return not is_remote(self._path)

    def local_path(self) -> Path:
        if not self.is_local():
            raise ValueError(f"Path {self} is not local")
        return self._path  # type: ignore[return-value]

    def is_file(self) -> bool:
        return ops.is_file(self._path)

    def is_dir(self) -> bool:
        return ops.is_dir(self._path)

    def size(self) -> int:
        if not self.is_local() and not self.is_file():
            raise FileNotFoundError(str(self))
        return ops.size(self._path)

    def mkdir(self, exist_ok: bool = True, parents: bool = False) -> None:
        """Make a local folder (object stores have none: a no-op there, as in Energon)."""
        if isinstance(self._path, Path):
            os.makedirs(self._path, exist_ok=True)

    def open(
        self, mode: str = "r", block_size: int | None = None, prefetch_file: bool = False
    ) -> IO[Any]:
        """Open the file: ``r``/``rb`` read, ``w``/``wb`` write (a remote object is written
        when the file is closed). ``block_size`` and ``prefetch_file`` are Energon's tuning
        knobs and change nothing here."""
        if mode not in ("r", "rb", "w", "wb"):
            raise ConfigError(f"EPath.open: {mode=} is not one of 'r', 'rb', 'w', 'wb'")
        path = self._path
        if isinstance(path, Path):
            if mode.startswith("w"):
                path.parent.mkdir(parents=True, exist_ok=True)
            return open(path, mode, encoding=None if "b" in mode else "utf-8")
        if mode.startswith("w"):
            writer = _RemoteWriter(path)
            return writer if mode == "wb" else io.TextIOWrapper(writer, encoding="utf-8")
        if not self.is_file():
            raise FileNotFoundError(str(self))
        data = ops.read_bytes(path)
        return io.BytesIO(data) if mode == "rb" else io.StringIO(data.decode("utf-8"))

    def read_text(self) -> str:
        with self.open("r") as f:
            return str(f.read())

    def read_bytes(self) -> bytes:
        with self.open("rb") as f:
            return bytes(f.read())

    def write_text(self, text: str) -> None:
        with self.open("w") as f:
            f.write(text)

    def write_bytes(self, data: bytes) -> None:
        with self.open("wb") as f:
            f.write(data)

    def unlink(self) -> None:
        ops.delete(self._path)

    def copy(self, target: EPath) -> None:
        """Copy a file, or every file below a folder, possibly across file systems."""
        if self.is_file():
            if isinstance(self._path, Path) and isinstance(target._path, Path):
                target._path.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(self._path, target._path)
            else:
                target.write_bytes(self.read_bytes())
            return
        for inner in self.walk():
            inner.copy(target / inner.relative_to(self))

    def move(self, target: EPath) -> None:
        self.copy(target)
        self.unlink()

    def walk(self) -> Iterator[EPath]:
        """Every file below this path (no folders), following local symlinks."""
        if self._dss is not None:
            below = EPath._of(self._path)
            for found in below.walk():
                yield EPath._of(found._path, f"{self._dss}/{found.relative_to(below)}")
            return
        path = self._path
        if isinstance(path, Path):
            for folder, _, files in os.walk(path, followlinks=True):
                for name in sorted(files):
                    yield EPath._of(Path(folder) / name)
            return
        for rel in ops.list_files(path, ""):
            yield EPath._of(path / rel)

    def glob(self, pattern: str) -> Iterator[EPath]:
        """The files below this path whose relative name matches ``pattern`` (``*``, ``?``,
        ``[...]`` within a name, ``**`` across folders; local symlinked folders are followed,
        as by ``walk``)."""
        wanted = pattern.strip("/").split("/")
        for found in self.walk():
            if _match(found.relative_to(self).split("/"), wanted):
                yield found

    def stat(self) -> ObjectMetadata:
        """The file's key, type, size and modification time (Energon's ``stat()`` fields)."""
        path = self._path
        if isinstance(path, Path):
            st = path.stat()
            kind = "directory" if path.is_dir() else "file"
            local_time = datetime.fromtimestamp(st.st_mtime, tz=timezone.utc)
            return ObjectMetadata(str(path), kind, st.st_size, local_time)
        info = ops.info(path)
        if info is None:
            raise FileNotFoundError(str(self))
        modified: Any = info.get("LastModified") or info.get("last_modified")
        if isinstance(modified, str):
            modified = datetime.fromisoformat(modified.replace("Z", "+00:00"))
        return ObjectMetadata(
            path.key, str(info.get("type", "file")), int(info.get("size") or 0), modified
        )


@dataclass(frozen=True)
class ObjectMetadata:
    """What ``EPath.stat()`` gives: the names of MSC's ``ObjectMetadata`` fields."""

    key: str
    type: str  # "file" or "directory"
    content_length: int
    last_modified: datetime | None


class _RemoteWriter(io.BytesIO):
    """Collects what is written and stores it as one object when closed."""

    def __init__(self, path: RemotePath) -> None:
        super().__init__()
        self._target = path

    def close(self) -> None:
        if self.closed:
            return
        data = self.getvalue()
        super().close()
        ops.write_atomic(self._target, data)


_LOCAL_TYPE = type(Path("/"))  # the concrete class local paths are made of (PosixPath here)


@functools.lru_cache(maxsize=1024)
def _local(text: str) -> EPath:
    """The local ``EPath`` of the absolute path ``text``: one object per string (paths are
    not changed in place) for the last 1,024 strings unpickled."""
    return EPath._of(Path(text))


def _absolute(text: str) -> Path:
    """An absolute local path with ``..`` and ``.`` resolved by name, as Energon does."""
    joined = posixpath.join(os.getcwd(), text)
    parts: list[str] = []
    for part in joined.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise ValueError(f"Path above root: {text}")
            parts.pop()
        else:
            parts.append(part)
    return Path("/" + "/".join(parts))


def _from_url(url: str) -> StoragePath:
    scheme, _, rest = url.partition("://")
    scheme = scheme.lower()
    if scheme == "file":
        return _absolute(rest)
    if scheme == "rclone":
        warnings.warn(
            "rclone:// protocol is deprecated. Use msc:// instead.", DeprecationWarning, 2
        )
        scheme = "msc"
    if scheme == "msc":
        profile, _, inner = rest.partition("/")
        if profile == DEFAULT_PROFILE_NAME:
            return _absolute("/" + inner)
        return as_path(f"msc://{rest}")
    if scheme in ("s3", "http", "https"):
        return as_path(url)
    raise ConfigError(
        f"EPath: {redact_url(url)!r} has an unsupported protocol {scheme!r}; use a local path, "
        "msc://profile/..., s3://bucket/... or http(s)://..."
    )


def _match(parts: list[str], pattern: list[str]) -> bool:
    """Whether the path ``parts`` match the glob ``pattern`` parts (``**``: any folders)."""
    from fnmatch import fnmatchcase

    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_match(parts[i:], pattern[1:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatchcase(parts[0], pattern[0]) and _match(parts[1:], pattern[1:])


#: Energon's module attribute: the dataset cache dss:// paths read (None: the environment
#: variable, read when a path is made)
NVDATASET_CACHE_DIR: EPath | None = (
    EPath(os.environ[CACHE_ENV]) if os.environ.get(CACHE_ENV) else None
)
