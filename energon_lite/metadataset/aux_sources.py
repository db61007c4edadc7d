"""``aux:`` of a metadataset entry: named sources a crude leaf's cookers read by file name.

A source is ``filesystem://DIR`` (a plain local folder), a prepared dataset folder or a
prepared ``.jsonl``, local or on remote storage (a URL such as ``s3://bucket/media-ds`` or
``msc://profile/ds``, or a relative path in a remote YAML); relative paths are made absolute
against the YAML file's folder here, and the pipeline opens them as FileStores
(``energon_lite.cache.file_store.open_file_store``).
"""

from __future__ import annotations

from typing import Any

from energon_lite.storage import RemotePath, StoragePath, is_url


def parse_aux(value: Any, base: StoragePath, where: Any) -> dict[str, str] | None:
    """``{name: absolute source}`` of an ``aux:`` value (``where`` names it in errors)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in value.items()
    ):
        raise where.error(
            f"{value!r}; must map names to a dataset folder, a .jsonl or filesystem://DIR"
        )
    out = {}
    for name, spec in value.items():
        scheme = "filesystem://" if spec.startswith("filesystem://") else ""
        rest = spec.removeprefix(scheme)
        if is_url(rest) and not scheme:
            out[name] = rest
            continue
        if "://" in rest:
            raise (where / name).error(
                f"{spec!r}: filesystem:// names a local folder; a remote source is a prepared "
                "dataset URL (s3://, msc://, http(s)://) without filesystem://"
                if scheme
                else f"{spec!r}: unknown scheme; a local path, filesystem://DIR or a URL"
            )
        if isinstance(base, RemotePath):
            if scheme:
                raise (where / name).error(
                    f"{spec!r}: filesystem:// names a local folder, but this metadataset is "
                    f"remote ({base}); give a prepared dataset or an absolute URL"
                )
            out[name] = str(base / rest)
            continue
        out[name] = scheme + str((base / rest).resolve())
    return out
