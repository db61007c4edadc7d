"""``aux:`` of a metadataset entry: named sources a crude leaf's cookers read by file name.

A source is ``filesystem://DIR`` (a plain folder), a prepared dataset folder or a prepared
``.jsonl``; relative paths are made absolute against the YAML file's folder here, and the
pipeline opens them as FileStores (``energon_lite.cache.file_store.open_file_store``).
"""

from __future__ import annotations

from typing import Any

from energon_lite.storage import StoragePath, local_only


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
    local = local_only(base, "aux:")
    out = {}
    for name, spec in value.items():
        scheme = "filesystem://" if spec.startswith("filesystem://") else ""
        rest = spec.removeprefix(scheme)
        if "://" in rest:
            raise (where / name).error(
                f"{spec!r}: remote sources are not supported; a local path or filesystem://DIR"
            )
        out[name] = scheme + str((local / rest).resolve())
    return out
