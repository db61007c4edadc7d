"""File operations on a local ``Path`` or a ``RemotePath``: what the dataset code needs.

Local paths go to the OS as before. Remote paths go through the process's client
(``clients.py``) with retries (``retry.py``), and what is read once is kept:

* small files (``.nv-meta`` YAML/JSON, metadataset YAMLs) in memory, per process;
* ``.tar.idx`` files in a local cache folder (``ENERGON_LITE_CACHE_DIR``, default
  ``~/.cache/energon_lite/remote``), named by the object's URL and ETag, so a rewritten index
  is fetched again and an unchanged one is memory-mapped from the local copy; the ETags come
  from one listing per folder and process.

Shard bytes are not read here but through ``ranged.ShardFile`` (windows with read-ahead).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from energon_lite.errors import DatasetFormatError
from energon_lite.storage import retry
from energon_lite.storage.clients import target
from energon_lite.storage.path import RemotePath, StoragePath

_small: dict[RemotePath, bytes] = {}
_listings: dict[RemotePath, dict[str, dict[str, Any]]] = {}
_SMALL_LIMIT = 4 << 20  # files kept in memory are metadata, never shards


def cache_dir() -> Path:
    root = os.environ.get("ENERGON_LITE_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "energon_lite", "remote"
    )
    return Path(root)


def forget(path: RemotePath) -> None:
    """Drop what this process remembers about ``path`` (after writing it)."""
    _small.pop(path, None)
    _listings.pop(path.parent, None)


def info(path: RemotePath) -> dict[str, Any] | None:
    """The store's description of an object (size, type, modification time), None if absent."""
    return _info(path)


def _info(path: RemotePath) -> dict[str, Any] | None:
    t = target(path)
    try:
        return retry.call(lambda: t.fs.info(t.path), "stat", str(path), t.secrets)
    except DatasetFormatError:
        return None


def exists(path: StoragePath) -> bool:
    if isinstance(path, Path):
        return path.exists()
    if path in _small or _info(path) is not None:
        return True
    # HTTP has no folders: a prepared dataset folder exists when its metadata does
    return path.scheme in ("http", "https") and any(
        _info(path / ".nv-meta" / name) is not None for name in (".info.json", ".info.yaml")
    )


def is_file(path: StoragePath) -> bool:
    if isinstance(path, Path):
        return path.is_file()
    if path in _small:
        return True
    info = _info(path)
    return info is not None and info.get("type") == "file"


def is_dir(path: StoragePath) -> bool:
    """A local folder, or a remote prefix holding at least one object."""
    if isinstance(path, Path):
        return path.is_dir()
    t = target(path)
    if path.scheme in ("http", "https"):
        return True  # no listing over plain HTTP: a folder is whatever the server serves
    return bool(retry.call(lambda: t.fs.isdir(t.path), "list", str(path), t.secrets))


def read_bytes(path: StoragePath) -> bytes:
    """The whole file; remote files are fetched once per process."""
    if isinstance(path, Path):
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise DatasetFormatError(f"{path}: file not found") from None
    data = _small.get(path)
    if data is None:
        t = target(path)
        data = retry.call(lambda: t.fs.cat_file(t.path), "read", str(path), t.secrets)
        retry.STATS.add("bytes", len(data))
        if len(data) <= _SMALL_LIMIT:
            _small[path] = data
    return data


def read_text(path: StoragePath) -> str:
    return read_bytes(path).decode("utf-8")


def read_range(path: RemotePath, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a remote object, cut at its end (one ranged GET, retried)."""
    end = min(end, stat(path)[1])
    t = target(path)
    where = f"{path} bytes {start}-{end}"

    def get() -> bytes:
        data = t.fs.cat_file(t.path, start=start, end=end)
        if len(data) != end - start:
            raise ConnectionResetError(f"short read: {len(data)} of {end - start} bytes")
        return data

    data = retry.call(get, "ranged read", where, t.secrets)
    retry.STATS.add("bytes", len(data))
    return data


def size(path: StoragePath) -> int:
    if isinstance(path, Path):
        return path.stat().st_size
    return stat(path)[1]


def list_files(root: StoragePath, suffix: str) -> list[str]:
    """Names relative to ``root`` of the files ending in ``suffix`` below it (recursive)."""
    if isinstance(root, Path):
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*" + suffix))
    if root.scheme in ("http", "https"):
        raise DatasetFormatError(f"{root}: an HTTP server cannot be listed; it is read-only")
    t = target(root)
    found = retry.call(lambda: t.fs.find(t.path), "list", str(root), t.secrets)
    prefix = t.path.rstrip("/") + "/"
    return sorted(f[len(prefix) :] for f in found if f.startswith(prefix) and f.endswith(suffix))


def stat(path: RemotePath) -> tuple[str, int]:
    """``(ETag, size)`` of an object, from one listing of its folder per process (or a HEAD)."""
    folder = path.parent
    entries = _listings.get(folder)
    if entries is None and path.scheme not in ("http", "https"):
        t = target(folder)
        try:
            listed = retry.call(
                lambda: t.fs.ls(t.path, detail=True), "list", str(folder), t.secrets
            )
        except DatasetFormatError:
            listed = []
        entries = _listings[folder] = {e["name"].rsplit("/", 1)[-1]: e for e in listed}
    if entries is None:
        entries = _listings[folder] = {}
    info = entries.get(path.name)
    if info is None:
        info = _info(path)
        if info is None:
            raise DatasetFormatError(f"{path}: not found")
        entries[path.name] = info
    tag = info.get("ETag") or info.get("etag") or info.get("LastModified") or ""
    return str(tag), int(info.get("size") or 0)


def local_copy(path: StoragePath) -> Path:
    """A local file with ``path``'s bytes: the path itself, or a cached download."""
    if isinstance(path, Path):
        return path
    name = hashlib.sha256(f"{path}|{stat(path)}".encode()).hexdigest()[:40] + path.suffix
    local = cache_dir() / name
    if not local.is_file():
        write_atomic(local, read_range_all(path))
    return local


def read_range_all(path: RemotePath) -> bytes:
    t = target(path)
    data = retry.call(lambda: t.fs.cat_file(t.path), "read", str(path), t.secrets)
    retry.STATS.add("bytes", len(data))
    return data


@contextlib.contextmanager
def downloaded(path: StoragePath) -> Iterator[Path]:
    """A local file to scan: ``path`` itself, or a temporary copy made with one streaming GET."""
    if isinstance(path, Path):
        yield path
        return
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="scan-", suffix=".tar", dir=folder)
    os.close(fd)
    try:
        t = target(path)
        retry.call(lambda: t.fs.get_file(t.path, name), "download", str(path), t.secrets)
        retry.STATS.add("bytes", os.path.getsize(name))
        yield Path(name)
    finally:
        os.unlink(name)


def delete(path: StoragePath) -> None:
    """Remove a file (a missing one is a FileNotFoundError, as for a local path)."""
    if isinstance(path, Path):
        path.unlink()
        return
    if path.scheme in ("http", "https"):
        raise DatasetFormatError(f"{path}: HTTP datasets are read-only")
    if _info(path) is None:
        raise FileNotFoundError(str(path))
    t = target(path)
    retry.call(lambda: t.fs.rm_file(t.path), "delete", str(path), t.secrets)
    forget(path)


def write_atomic(path: StoragePath, data: bytes) -> None:
    """Replace ``path`` whole or not at all: temp file + rename locally, one PUT remotely."""
    if isinstance(path, Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        # NAME.tmp-PID: unique per process, and the form prepare's clean-up of a dead
        # process's temporaries recognises (index/folder_lock.py)
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        return
    if path.scheme in ("http", "https"):
        raise DatasetFormatError(f"{path}: HTTP datasets are read-only; prepare them elsewhere")
    t = target(path)
    retry.call(lambda: t.fs.pipe_file(t.path, data), "write", str(path), t.secrets)
    forget(path)
