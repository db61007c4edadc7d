"""``aux:`` of a metadataset entry: named sources a crude leaf's cookers read by file name.

A source is a plain folder (``filesystem://DIR``; on remote storage
``filesystem+msc://profile/DIR``, ``filesystem+s3://bucket/DIR``, or a relative
``filesystem://DIR`` in a remote YAML), a prepared dataset folder or a prepared ``.jsonl``,
local or on remote storage (a URL such as ``s3://bucket/media-ds`` or ``msc://profile/ds``,
or a relative path in a remote YAML); relative paths are made absolute against the YAML
file's folder here (a plain folder becomes ``filesystem://`` + its absolute path or URL),
and the pipeline opens them as FileStores
(``energon_lite.cache.file_store.open_file_store``).
"""

from __future__ import annotations

from typing import Any

from energon_lite.storage import StoragePath, is_url


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
        if spec.startswith("filesystem+") and "://" in spec:  # a plain folder at a URL
            url = spec.removeprefix("filesystem+")
            if not is_url(url):
                raise (where / name).error(
                    f"{spec!r}: unknown scheme {url.split('://')[0]!r} after filesystem+; "
                    "use filesystem+msc://, filesystem+s3:// ... or filesystem://DIR"
                )
            out[name] = "filesystem://" + url
            continue
        if is_url(rest) and not scheme:
            out[name] = rest
            continue
        if "://" in rest:
            raise (where / name).error(
                f"{spec!r}: filesystem:// takes a path; a plain folder on remote storage is "
                f"filesystem+{rest} (as in Energon)"
                if scheme
                else f"{spec!r}: unknown scheme; a local path, filesystem://DIR or a URL"
            )
        out[name] = scheme + str((base / rest).resolve())  # a remote path resolves to itself
    return out
