"""File operations on a local ``Path`` or a ``RemotePath``: what the dataset code needs.

Local paths go to the OS as before. Remote paths go through the process's client
(``clients.py``) with retries (``retry.py``), and what is read once is kept:

* small files (``.nv-meta`` YAML/JSON, metadataset YAMLs) in memory, per process;
* ``.tar.idx`` files in a local cache folder (``ENERGON_LITE_CACHE_DIR``, default
  ``~/.cache/energon_lite/remote``), named by the object's URL and ETag, so a rewritten index
  is fetched again and an unchanged one is memory-mapped from the local copy; the ETags come
  from one listing per folder and process.

Shard bytes are not read here but through ``ranged.ShardFile`` (windows with read-ahead),
which calls ``read_range``: one ranged GET, bounded in total time (``request_timeout()``, not
only per socket read, so a server trickling bytes cannot stall a worker) and, given the
object's ``version`` (its ETag, else its Last-Modified: see ``version``), conditional on it:
S3 gets ``IfMatch``, Azure ``If-Match``, GCS ``ifGenerationMatch``, HTTP ``If-Match`` (or
``If-Unmodified-Since``), an MSC profile what its kind allows (``msc_fs.py``), and the version the
answer carries is compared too, so an object replaced by one of the same size is refused
with ``ObjectChangedError`` naming it, never served through the old index.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import hashlib
import os
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from energon_lite.errors import DatasetFormatError
from energon_lite.storage import retry
from energon_lite.storage.path import RemotePath, StoragePath
from energon_lite.storage.session import session

if TYPE_CHECKING:
    from energon_lite.storage.clients import Target

_SMALL_LIMIT = 4 << 20  # files kept in memory are metadata, never shards


class ObjectChangedError(DatasetFormatError):
    """A remote object's ETag (or Last-Modified) is not the one its dataset was read with."""


def cache_dir() -> Path:
    root = os.environ.get("ENERGON_LITE_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "energon_lite", "remote"
    )
    return Path(root)


def forget(path: StoragePath) -> None:
    """Drop what this process remembers about ``path`` (after writing it)."""
    if isinstance(path, Path):
        return  # nothing of a local file is remembered
    held = session()
    held.small.pop(path, None)
    held.listings.pop(path.parent, None)


def forget_under(root: StoragePath, keep: StoragePath | None = None) -> None:
    """Drop what this process remembers of files and listings below ``root`` (but ``keep``,
    a folder below it): a dataset that opens pins its shards' versions as they are now, never
    from an earlier open (the dataset may have been replaced and prepared again since)."""
    if isinstance(root, Path):
        return
    prefix = str(root).rstrip("/")
    kept = str(keep).rstrip("/") if keep is not None else None
    held = session()
    for cache in (held.small, held.listings):
        for key in [k for k in cache if str(k) == prefix or str(k).startswith(prefix + "/")]:
            if kept is None or not (str(key) == kept or str(key).startswith(kept + "/")):
                del cache[key]


def _target(path: RemotePath) -> Target:
    """The client for a remote ``path``: the client layer (and the MSC profile reader) loads
    with the first remote path, never for a local dataset."""
    from energon_lite.storage.clients import target

    return target(path)


def info(path: RemotePath) -> dict[str, Any] | None:
    """The store's description of an object (size, type, modification time), None if absent."""
    return _info(path)


def _info(path: RemotePath) -> dict[str, Any] | None:
    t = _target(path)
    try:
        return retry.call(lambda: t.fs.info(t.path), "stat", str(path), t.secrets)
    except DatasetFormatError:
        return None


def exists(path: StoragePath) -> bool:
    if isinstance(path, Path):
        return path.exists()
    if path in session().small or _info(path) is not None:
        return True
    # HTTP has no folders: a prepared dataset folder exists when its metadata does
    return path.scheme in ("http", "https") and any(
        _info(path / ".nv-meta" / name) is not None for name in (".info.json", ".info.yaml")
    )


def is_file(path: StoragePath) -> bool:
    if isinstance(path, Path):
        return path.is_file()
    if path in session().small:
        return True
    info = _info(path)
    return info is not None and info.get("type") == "file"


def is_dir(path: StoragePath) -> bool:
    """A local folder, or a remote prefix holding at least one object."""
    if isinstance(path, Path):
        return path.is_dir()
    t = _target(path)
    if path.scheme in ("http", "https"):
        return True  # no listing over plain HTTP: a folder is whatever the server serves
    if "/" not in t.path.strip("/"):  # a bucket: a folder while it holds an object, as in MSC
        return bool(retry.call(lambda: _holds_objects(t.fs, t.path), "list", str(path), t.secrets))
    return bool(retry.call(lambda: t.fs.isdir(t.path), "list", str(path), t.secrets))


def absence(path: StoragePath) -> str | None:
    """Why the folder ``path`` is not there, or None when it is: for a remote path, whether
    its bucket (container) is missing or only the prefix (no object under it)."""
    if isinstance(path, Path):
        return None if path.exists() else "the path does not exist"
    if path.scheme not in ("s3", "az", "gs"):
        return None  # HTTP has no listing; an MSC profile names its own base
    t = _target(path)
    bucket = t.path.strip("/").split("/")[0]
    if not retry.call(lambda: t.fs.exists(bucket), "list", str(path), t.secrets):
        return f"bucket {bucket!r} does not exist (or these credentials cannot see it)"
    if "/" in t.path.strip("/") and not is_dir(path):
        return f"bucket {bucket!r} holds no object under the prefix {path.key!r}"
    return None


def _holds_objects(fs: Any, bucket: str) -> bool:
    try:
        return bool(fs.ls(bucket, detail=False, refresh=True))
    except FileNotFoundError:
        return False


def read_bytes(path: StoragePath) -> bytes:
    """The whole file; remote files are fetched once per process."""
    if isinstance(path, Path):
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise DatasetFormatError(f"{path}: file not found") from None
    small = session().small
    data = small.get(path)
    if data is None:
        t = _target(path)
        data = retry.call(lambda: t.fs.cat_file(t.path), "read", str(path), t.secrets)
        retry.STATS.add("bytes", len(data))
        if len(data) <= _SMALL_LIMIT:
            small[path] = data
    return data


def read_text(path: StoragePath) -> str:
    return read_bytes(path).decode("utf-8")


def read_range(path: RemotePath, start: int, end: int, version: str = "") -> bytes:
    """Bytes ``[start, end)`` of a remote object, cut at its end (one ranged GET, retried,
    each attempt bounded by ``request_timeout()``); with ``version`` (from :func:`version`)
    the GET is conditional on it and ``ObjectChangedError`` refuses a replaced object."""
    end = min(end, stat(path)[1])
    if end <= start:
        return b""
    t = _target(path)
    where = f"{path} bytes {start}-{end}"

    def get() -> bytes:
        data = _bounded_get(path, t, start, end, version)
        if len(data) != end - start:
            raise ConnectionResetError(f"short read: {len(data)} of {end - start} bytes")
        return data

    data = retry.call(get, "ranged read", where, t.secrets)
    retry.STATS.add("bytes", len(data))
    return data


def version(path: StoragePath) -> str:
    """What names the content of a remote object now: ``"generation:<n>"`` on GCS, else
    ``"etag:<ETag>"``, else
    ``"last-modified:<date>"`` (an HTTP server without ETags), else ``""`` (nothing to check,
    and always for a local file: its reads are not conditional)."""
    if isinstance(path, Path):
        return ""
    _, _ = stat(path)  # fills the listing entry
    info = session().listings[path.parent].get(path.name) or {}
    if path.scheme == "gs" and info.get("generation"):
        return f"generation:{info['generation']}"  # GCS's own content version
    tag = info.get("ETag") or info.get("etag")
    if tag:
        return f"etag:{tag}"
    modified = info.get("Last-Modified") or info.get("last-modified")
    return f"last-modified:{modified}" if modified else ""


def changed_error(path: RemotePath, old: str, new: str) -> ObjectChangedError:
    return ObjectChangedError(
        f"{path}: the object changed since the dataset was prepared or opened ({old} -> "
        f"{new or 'a different version'}): it was replaced, perhaps by one of the same size, "
        "and its index no longer describes it. Restore the object, or re-run `energon-lite "
        "prepare` on the dataset and start the run again"
    )


def _bounded_get(path: RemotePath, t: Any, start: int, end: int, expected: str) -> bytes:
    """One ranged GET within ``request_timeout()`` seconds in all, conditional on ``expected``."""
    if path.scheme == "msc":
        return _blocking_get(path, t, start, end, expected)
    from fsspec.asyn import sync

    get = _GETS.get(path.scheme, _http_get)
    from energon_lite.storage.clients import request_timeout

    timeout = request_timeout()

    async def bounded() -> tuple[bytes, str] | None:
        try:
            return await asyncio.wait_for(get(t, start, end, expected), timeout)
        except asyncio.TimeoutError:
            return None  # raised below: fsspec's sync would turn it into a bare FSTimeoutError

    try:
        answer = sync(t.fs.loop, bounded)
    except ObjectChangedError:
        raise
    except Exception as exc:
        if retry.precondition_failed(exc):
            raise changed_error(path, expected, "") from None
        raise
    if answer is None:
        raise TimeoutError(
            f"no complete answer within {timeout:g} s "
            "(ENERGON_LITE_REQUEST_TIMEOUT, the bound on one request)"
        )
    data, seen = answer
    if expected and seen and seen != expected:
        raise changed_error(path, expected, seen)
    return data


def _blocking_get(path: RemotePath, t: Any, start: int, end: int, expected: str) -> bytes:
    """``_bounded_get`` for a client without an event loop (MSC's): the GET runs on one of the
    session's threads, waited for ``request_timeout()`` seconds at most; one that overruns is
    left to end on its SDK's socket timeout while the retry goes ahead."""
    from energon_lite.storage.clients import request_timeout

    held = session()
    if held.blocking is None:
        held.blocking = ThreadPoolExecutor(max_workers=4, thread_name_prefix="energon-lite-get")
    timeout = request_timeout()
    future = held.blocking.submit(t.fs.ranged_get, t.path, start, end, expected)
    try:
        data, seen = future.result(timeout)
    except concurrent.futures.TimeoutError:
        raise TimeoutError(
            f"no complete answer within {timeout:g} s "
            "(ENERGON_LITE_REQUEST_TIMEOUT, the bound on one request)"
        ) from None
    except Exception as exc:
        if retry.precondition_failed(exc):
            raise changed_error(path, expected, "") from None
        raise
    if expected and seen and seen != expected:
        raise changed_error(path, expected, seen)
    return data


async def _s3_get(t: Any, start: int, end: int, expected: str) -> tuple[bytes, str]:
    bucket, key, _ = t.fs.split_path(t.path)
    kwargs: dict[str, Any] = {"Range": f"bytes={start}-{end - 1}"}
    if expected.startswith("etag:"):
        kwargs["IfMatch"] = expected[5:]
    response = await t.fs._call_s3("get_object", Bucket=bucket, Key=key, **kwargs)
    try:
        data = await response["Body"].read()
    finally:
        response["Body"].close()
    tag = response.get("ETag")
    return data, f"etag:{tag}" if tag and expected.startswith("etag:") else ""


async def _http_get(t: Any, start: int, end: int, expected: str) -> tuple[bytes, str]:
    kwargs = dict(t.fs.kwargs)
    headers = dict(kwargs.pop("headers", None) or {})
    headers["Range"] = f"bytes={start}-{end - 1}"
    if expected.startswith("etag:") and not expected[5:].startswith("W/"):
        headers["If-Match"] = expected[5:]  # a weak ETag cannot be matched, only compared
    elif expected.startswith("last-modified:"):
        headers["If-Unmodified-Since"] = expected[14:]
    session = await t.fs.set_session()
    async with session.get(t.fs.encode_url(t.path), headers=headers, **kwargs) as response:
        if response.status == 412:
            raise retry.PreconditionFailed(f"HTTP 412 for {headers}")
        if response.status == 404:
            raise FileNotFoundError(errno.ENOENT, "not found", t.path)
        response.raise_for_status()
        data = await response.read()
        if response.status == 200:  # the server ignored Range: the whole object came
            data = data[start:end]
        seen = ""
        if expected.startswith("etag:") and response.headers.get("ETag"):
            seen = f"etag:{response.headers['ETag']}"
        elif expected.startswith("last-modified:") and response.headers.get("Last-Modified"):
            seen = f"last-modified:{response.headers['Last-Modified']}"
    return data, seen


async def _az_get(t: Any, start: int, end: int, expected: str) -> tuple[bytes, str]:
    container, _, blob = t.path.partition("/")
    kwargs: dict[str, Any] = {}
    if expected.startswith("etag:"):
        from azure.core import MatchConditions

        kwargs = {"etag": expected[5:], "match_condition": MatchConditions.IfNotModified}
    async with t.fs.service_client.get_blob_client(container=container, blob=blob) as client:
        stream = await client.download_blob(
            offset=start, length=end - start, max_concurrency=1, **kwargs
        )
        data = await stream.readall()
    tag = str(stream.properties.etag or "")
    if not (tag and expected.startswith("etag:")):
        return data, ""
    same = tag.strip('"') == expected[5:].strip('"')  # the SDK and the listing quote alike
    return data, expected if same else f"etag:{tag}"


async def _gs_get(t: Any, start: int, end: int, expected: str) -> tuple[bytes, str]:
    bucket, key, _ = t.fs.split_path(t.path)
    params: dict[str, Any] = {"alt": "media"}
    if expected.startswith("generation:"):
        params["ifGenerationMatch"] = expected[11:]
    await t.fs._set_session()
    url = t.fs._format_path("b/{}/o/{}", (bucket, key))
    headers = t.fs._get_headers({"Range": f"bytes={start}-{end - 1}"})
    async with t.fs.session.get(url, params=t.fs._get_params(params), headers=headers) as response:
        if response.status == 412:
            raise retry.PreconditionFailed(
                f"HTTP 412 for generation {params.get('ifGenerationMatch')}"
            )
        if response.status == 404:
            raise FileNotFoundError(errno.ENOENT, "not found", t.path)
        response.raise_for_status()
        data = await response.read()
        if response.status == 200:  # the whole object came
            data = data[start:end]
        seen = response.headers.get("X-Goog-Generation")
    return data, f"generation:{seen}" if seen and expected.startswith("generation:") else ""


_GETS = {"s3": _s3_get, "az": _az_get, "gs": _gs_get}


def read_span(path: StoragePath, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a file, cut at its end (remotely one ranged GET)."""
    if isinstance(path, RemotePath):
        return read_range(path, start, end)
    with open(path, "rb") as file:
        file.seek(start)
        return file.read(max(0, end - start))


def edges(path: StoragePath, edge: int) -> bytes | None:
    """``b"<size>:"``, the first ``edge`` bytes and, past them, ``edge`` more from
    ``max(edge, size - edge)`` (a cheap identity of a file's content); None if it is missing."""
    try:
        total = size(path)
    except (FileNotFoundError, DatasetFormatError):
        return None
    data = f"{total}:".encode() + (read_span(path, 0, edge) if total else b"")
    if total > edge:
        start = max(edge, total - edge)
        data += read_span(path, start, start + edge)
    return data


def read_if_present(path: StoragePath) -> bytes | None:
    """The whole file (a remote one kept in memory as ``read_bytes``), None when it is absent
    (a remote one known absent from its folder's listing, without a failing GET)."""
    if isinstance(path, RemotePath):
        try:
            stat(path)
        except DatasetFormatError:
            return None
    try:
        return read_bytes(path)
    except DatasetFormatError:
        if isinstance(path, Path) and not path.exists():
            return None
        raise


def size(path: StoragePath) -> int:
    if isinstance(path, Path):
        return path.stat().st_size
    return stat(path)[1]


def list_files(root: StoragePath, suffix: str, skip: str = "") -> list[str]:
    """Names relative to ``root`` of the files ending in ``suffix`` below it (recursive),
    sorted; ``skip``: leave out folders whose name starts with it (and what is in them)."""
    if isinstance(root, Path):
        if not skip:
            return sorted(p.relative_to(root).as_posix() for p in root.rglob("*" + suffix))
        found = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(skip))
            found += [
                Path(dirpath, n).relative_to(root).as_posix()
                for n in filenames
                if n.endswith(suffix)
            ]
        return sorted(found)
    if root.scheme in ("http", "https"):
        raise DatasetFormatError(f"{root}: an HTTP server cannot be listed; it is read-only")
    t = _target(root)
    found = retry.call(lambda: t.fs.find(t.path), "list", str(root), t.secrets)
    prefix = t.path.rstrip("/") + "/"
    names = [f[len(prefix) :] for f in found if f.startswith(prefix) and f.endswith(suffix)]
    if skip:
        names = [n for n in names if not any(p.startswith(skip) for p in n.split("/")[:-1])]
    return sorted(names)


def fresh_listing(folder: RemotePath) -> dict[str, tuple[str, int]] | None:
    """``{name: (ETag, size)}`` of the objects in ``folder`` now (one listing, which the
    process then remembers for ``stat``); None over HTTP, which cannot list."""
    if folder.scheme in ("http", "https"):
        return None
    entries = _list(folder)
    return {
        name: (str(e.get("ETag") or e.get("etag") or ""), int(e.get("size") or 0))
        for name, e in entries.items()
    }


def _list(folder: RemotePath) -> dict[str, dict[str, Any]]:
    t = _target(folder)
    try:
        listed = retry.call(
            lambda: t.fs.ls(t.path, detail=True, refresh=True), "list", str(folder), t.secrets
        )
    except DatasetFormatError:
        listed = []
    entries = session().listings[folder] = {e["name"].rsplit("/", 1)[-1]: e for e in listed}
    return entries


def stat(path: RemotePath) -> tuple[str, int]:
    """``(ETag, size)`` of an object, from one listing of its folder per process (or a HEAD)."""
    folder = path.parent
    listings = session().listings
    entries = listings.get(folder)
    if entries is None and path.scheme not in ("http", "https"):
        entries = _list(folder)
    if entries is None:
        entries = listings[folder] = {}
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
        data = read_range_all(path)
        try:
            write_atomic(local, data)  # removes its temporary file when it fails
        except OSError as exc:
            full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
            raise OSError(
                exc.errno,
                f"cannot keep the index of {path} in the remote index cache "
                f"({exc.strerror or exc}): "
                + ("free space there or " if full else "")
                + "point ENERGON_LITE_CACHE_DIR at a writable folder with room",
                str(local.parent),
            ) from None
    return local


def read_range_all(path: StoragePath) -> bytes:
    """The whole file, read now (never from or into the small-file memory)."""
    if isinstance(path, Path):
        return path.read_bytes()
    t = _target(path)
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
        t = _target(path)
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
    t = _target(path)
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
    t = _target(path)
    retry.call(lambda: t.fs.pipe_file(t.path, data), "write", str(path), t.secrets)
    forget(path)
