"""``MscFileSystem``: the file calls the storage layer makes (``ops.py``), over one MSC
``StorageClient`` of one profile.

Paths are ``/`` + the key inside the profile (``/ds/.nv-meta/.info.yaml``), so the profile's
root is ``/`` and names listed under it keep their folder. Each call is one MSC request (a
folder's ``info`` that finds no object lists the prefix once more); retries are the caller's
(``retry.call``), the client itself makes one attempt (``msc.py``).

``ranged_get`` is the ranged read the shards go through. Given a pinned version (the ETag
the object had when its dataset was opened) it is conditional where the profile's SDK can
say so: an S3-type profile sends ``IfMatch``, an Azure one ``If-Match``, each through the
client MSC built (its endpoint and credentials); a replaced object then answers 412, which
``ops`` turns into ``ObjectChangedError``. Other kinds (GCS, OCI, AIStore, POSIX) read the
range through MSC unconditionally: their version is compared when the dataset opens.
"""

from __future__ import annotations

from typing import Any


def _entry(key: str, meta: Any) -> dict[str, Any]:
    return {
        "name": "/" + key.strip("/"),
        "size": int(meta.content_length or 0),
        "type": "directory" if meta.type == "directory" else "file",
        "ETag": meta.etag,
        "LastModified": meta.last_modified,
    }


class MscFileSystem:
    """fsspec's ``info``/``exists``/``isdir``/``ls``/``find``/``cat_file``/``pipe_file``/``rm_file``/``get_file``
    over an MSC client, plus ``ranged_get`` (see the module doc)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def info(self, path: str) -> dict[str, Any]:
        key = path.strip("/")
        if key:
            try:
                meta = self.client.info(key)
                return _entry(key, meta)
            except FileNotFoundError:
                pass
        # a prefix of an object store: a folder while an object lies below it
        if key and next(iter(self.client.list(path=key + "/")), None) is None:
            raise FileNotFoundError(path)
        return {"name": "/" + key, "size": 0, "type": "directory", "ETag": None}

    def exists(self, path: str) -> bool:
        try:
            self.info(path)
        except FileNotFoundError:
            return False
        return True

    def isdir(self, path: str) -> bool:
        try:
            return self.info(path)["type"] == "directory"
        except FileNotFoundError:
            return False

    def ls(self, path: str, detail: bool = True, refresh: bool = True) -> list[Any]:
        """The objects and folders right below ``path`` (``refresh``: always; nothing is kept)."""
        key = path.strip("/")
        listed = self.client.list(path=key + "/" if key else "", include_directories=True)
        entries = [_entry(meta.key, meta) for meta in listed]
        return entries if detail else [e["name"] for e in entries]

    def find(self, path: str) -> list[str]:
        """Every object below ``path`` (recursive)."""
        key = path.strip("/")
        return ["/" + meta.key for meta in self.client.list(path=key + "/" if key else "")]

    def cat_file(self, path: str) -> bytes:
        return bytes(self.client.read(path.strip("/")))

    def pipe_file(self, path: str, data: bytes) -> None:
        self.client.write(path.strip("/"), data)

    def rm_file(self, path: str) -> None:
        self.client.delete(path.strip("/"))

    def get_file(self, path: str, local: str) -> None:
        self.client.download_file(path.strip("/"), local)

    def ranged_get(self, path: str, start: int, end: int, expected: str) -> tuple[bytes, str]:
        """Bytes ``[start, end)`` and the version the answer carried ("" when none was asked
        or the kind cannot say); conditional on ``expected`` where the SDK allows."""
        from multistorageclient.types import Range

        key = path.strip("/")
        provider = self._pinnable()
        if expected.startswith("etag:") and provider is not None:
            kind = type(provider).__name__
            if kind == "AzureBlobStorageProvider":
                return _azure_get(provider, key, start, end, expected[5:])
            return _s3_get(provider, key, start, end, expected[5:])
        return bytes(self.client.read(key, byte_range=Range(offset=start, size=end - start))), ""

    def _pinnable(self) -> Any:
        """The profile's storage provider when its SDK client can be asked conditionally: a
        single S3-type (boto3, not MSC's Rust client) or Azure provider with no manifest or
        replicas between the key and the object."""
        single = getattr(self.client, "_delegate", None)
        provider = getattr(single, "_storage_provider", None)
        if provider is None or getattr(single, "_metadata_provider", None) is not None:
            return None
        if getattr(single, "_replica_manager", None) is not None:
            return None
        if hasattr(provider, "_s3_client") and getattr(provider, "_rust_client", None) is None:
            return provider
        if type(provider).__name__ == "AzureBlobStorageProvider":
            return provider
        return None


def _s3_get(provider: Any, key: str, start: int, end: int, etag: str) -> tuple[bytes, str]:
    from multistorageclient.utils import split_path

    bucket, name = split_path(provider._prepend_base_path(key))
    response = provider._s3_client.get_object(
        Bucket=bucket, Key=name, Range=f"bytes={start}-{end - 1}", IfMatch=etag
    )
    data = response["Body"].read()
    seen = str(response.get("ETag") or "")
    return data, _same_or_seen(etag, seen)


def _azure_get(provider: Any, key: str, start: int, end: int, etag: str) -> tuple[bytes, str]:
    from azure.core import MatchConditions
    from multistorageclient.utils import split_path

    container, blob = split_path(provider._prepend_base_path(key))
    provider._refresh_blob_service_client_if_needed()
    client = provider._blob_service_client.get_blob_client(container=container, blob=blob)
    stream = client.download_blob(
        offset=start,
        length=end - start,
        etag=etag,
        match_condition=MatchConditions.IfNotModified,
    )
    data = stream.readall()
    return data, _same_or_seen(etag, str(stream.properties.etag or ""))


def _same_or_seen(expected: str, seen: str) -> str:
    """``etag:<expected>`` when the answer's ETag is the pinned one (MSC's listing and the SDK
    may quote it differently), else ``etag:<seen>`` ("" when the answer had none)."""
    if not seen:
        return ""
    return f"etag:{expected}" if seen.strip('"') == expected.strip('"') else f"etag:{seen}"
