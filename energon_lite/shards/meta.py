"""The ``.nv-meta`` folder: ``.info.json`` (or legacy ``.info.yaml``), ``split.yaml`` and
``dataset.yaml``. Readers return plain data; writers are atomic (temp + rename by prepare).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import yaml

from energon_lite.errors import DatasetFormatError, short_repr, unknown_keys
from energon_lite.shards.bounded import YAMLBoundError, expand_bounded, load_bounded_yaml
from energon_lite.shards.plain_yaml import parse_plain_lists
from energon_lite.storage import RemotePath, StoragePath, as_path, ops
from energon_lite.storage.ops import write_atomic

META_DIR = ".nv-meta"
INFO_JSON = ".info.json"
INFO_YAML = ".info.yaml"


def load_yaml(
    path: str | os.PathLike[str] | RemotePath,
    plain_lists: bool = False,
    max_bytes: int | None = None,
) -> Any:
    """Parse a YAML (or JSON) file within bounds (``shards/bounded.py``: no alias bombs, no
    deep nesting); a syntax error names the file and line. ``plain_lists``: try the fast
    reader of ``shards/plain_yaml.py`` first (split.yaml's usual shape). ``max_bytes``: a
    larger file is refused before it is parsed (PyYAML's parser takes about 5 s a MiB)."""
    where_file = as_path(path)
    try:
        text = where_file.read_text(encoding="utf-8")
        if max_bytes is not None and len(text) > max_bytes:
            raise DatasetFormatError(
                f"{where_file}: {len(text):,} characters; a file of this kind holds at most "
                f"{max_bytes:,} (split a large metadataset into nested files)"
            )
    except FileNotFoundError:
        raise DatasetFormatError(f"{where_file}: file not found") from None
    except UnicodeDecodeError as exc:
        raise DatasetFormatError(f"{where_file}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise DatasetFormatError(f"{where_file}: cannot read: {exc.strerror or exc}") from None
    fast = parse_plain_lists(text) if plain_lists else None
    if fast is not None:
        return fast
    try:
        return load_bounded_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = (
            f"{where_file}:{mark.line + 1}:{mark.column + 1}"
            if mark is not None
            else str(where_file)
        )
        problem = getattr(exc, "problem", None) or str(exc)
        label = "YAML refused" if isinstance(exc, YAMLBoundError) else "YAML syntax error"
        raise DatasetFormatError(f"{where}: {label}: {problem}") from None
    except (ValueError, OverflowError, RecursionError) as exc:  # e.g. a 5000-digit integer
        message = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise DatasetFormatError(f"{where_file}: YAML value not accepted: {message}") from None


MAX_NAMES = 1_000_000  # brace patterns outside a dataset (prepare's --split-parts)


def expand(patterns: list[str] | str, where: str = "pattern") -> list[str]:
    """Brace-expand names (``parts/data-{0..2}.tar``) keeping order; at most MAX_NAMES."""
    return expand_bounded(patterns, MAX_NAMES, "names", where)


@dataclass
class DatasetInfo:
    """Shard names in shard-id order and their sample counts."""

    shard_names: list[str]
    shard_counts: list[int]
    energon_version: str | None = None


def _not_prepared(root: StoragePath, meta: StoragePath) -> str:
    """Which of three it is: no bucket, no prefix (or folder), or no ``.nv-meta`` in it."""
    missing = ops.absence(root)
    if missing is not None:
        return f"{root}: {missing}; check the path"
    if not ops.is_dir(meta):
        return (
            f"{root} has no {META_DIR} folder: it is not a prepared dataset (yet); "
            "run `energon-lite prepare` on it"
        )
    return (
        f"{meta}: no {INFO_JSON} or {INFO_YAML}; is {root} a prepared dataset? "
        "Run `energon-lite prepare` on it"
    )


def load_info(root: str | os.PathLike[str] | RemotePath) -> DatasetInfo:
    meta = as_path(root) / META_DIR
    json_path, yaml_path = meta / INFO_JSON, meta / INFO_YAML
    if json_path.is_file():
        try:
            data = json.loads(json_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise DatasetFormatError(f"{json_path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
        except (ValueError, RecursionError) as exc:
            raise DatasetFormatError(f"{json_path}: invalid JSON: {type(exc).__name__}") from None
        where = json_path
    elif yaml_path.is_file():
        data, where = load_yaml(yaml_path), yaml_path
    else:
        raise DatasetFormatError(_not_prepared(as_path(root), meta))
    counts = data.get("shard_counts") if isinstance(data, dict) else None
    if not isinstance(counts, dict):
        raise DatasetFormatError(f"{where}: key 'shard_counts' must map shard names to counts")
    for name, count in counts.items():
        if not isinstance(count, int) or count < 0:
            raise DatasetFormatError(
                f"{where}: shard_counts[{short_repr(name)}] = {short_repr(count)} is not a count"
            )
    return DatasetInfo(list(counts), list(counts.values()), data.get("energon_version"))


def write_info(meta_dir: StoragePath, info: DatasetInfo) -> None:
    payload = {
        "energon_version": info.energon_version,
        "shard_counts": dict(zip(info.shard_names, info.shard_counts)),
    }
    write_atomic(meta_dir / INFO_JSON, (json.dumps(payload, indent=2) + "\n").encode())


_SPLIT_KEYS = ("split_parts", "exclude")
DATASET_KEYS = (
    "__module__",
    "__class__",
    "sample_type",
    "field_map",
    "sample_loader",
    "part_filter",
    "subflavors",
    "split_config",  # Energon: the split file in .nv-meta this dataset.yaml reads
)


@dataclass
class SplitConfig:
    """A ``split.yaml`` read: the shard names of each split and those excluded."""

    split_parts: dict[str, list[str]]  # brace-expanded shard names per split
    exclude: list[str]  # brace-expanded: shard names or "<shard>/<sample key>"
    source: StoragePath


def load_split(
    root: str | os.PathLike[str] | RemotePath,
    name: str = "split.yaml",
    info: DatasetInfo | None = None,
) -> SplitConfig:
    """The split file; ``info``: the dataset's ``.info.json`` when the caller has read it
    already (it bounds the names; read here otherwise)."""
    meta = as_path(root) / META_DIR
    path = meta / name
    if not path.is_file() and name == "split.yaml" and (meta / "split.json").is_file():
        path = meta / "split.json"
    if name == "split.yaml" and not path.is_file() and not ops.is_dir(meta):
        raise DatasetFormatError(_not_prepared(as_path(root), meta))  # lint reads it first
    data = load_yaml(path, plain_lists=True)
    if isinstance(data, dict):
        unknown = unknown_keys(data, _SPLIT_KEYS)
        if unknown:
            raise DatasetFormatError(f"{path}: {unknown}")
    if not isinstance(data, dict) or not isinstance(data.get("split_parts"), dict):
        raise DatasetFormatError(f"{path}: needs a mapping 'split_parts: {{split: [shards]}}'")
    try:  # no split lists more shards than the dataset has (bounds brace patterns)
        info = info if info is not None else load_info(root)
        shards, samples = len(info.shard_names), sum(info.shard_counts)
    except DatasetFormatError:
        shards = samples = MAX_NAMES
    what = f"shards (the dataset has {shards})"
    parts = {
        str(k): expand_bounded(v or [], shards, what, f"{path}: split_parts.{short_repr(k, 40)}")
        for k, v in data["split_parts"].items()
    }
    exclude = expand_bounded(
        data.get("exclude") or [],
        shards + samples,
        f"shards and samples (the dataset has {shards} and {samples})",
        f"{path}: exclude",
    )
    return SplitConfig(parts, exclude, path)


def write_split(
    meta_dir: StoragePath, split_parts: dict[str, list[str]], exclude: list[str]
) -> None:
    payload = {"split_parts": split_parts, "exclude": exclude}
    write_atomic(meta_dir / "split.yaml", yaml.safe_dump(payload, sort_keys=False).encode())


def load_dataset_config(
    root: str | os.PathLike[str] | RemotePath, name: str = "dataset.yaml"
) -> dict[str, Any]:
    path = as_path(root) / META_DIR / name
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise DatasetFormatError(f"{path}: must be a mapping (sample_type/field_map or __class__)")
    unknown = unknown_keys(data, DATASET_KEYS)
    if unknown:
        raise DatasetFormatError(f"{path}: {unknown}")
    split_config = data.get("split_config")
    if split_config is not None and (
        not isinstance(split_config, str)
        or "/" in split_config
        or "\\" in split_config
        or split_config.startswith(".")
        or not split_config.endswith((".yaml", ".yml"))
    ):
        raise DatasetFormatError(
            f"{path}: split_config: {short_repr(split_config)}; give the name of a .yaml file "
            f"in {META_DIR} (e.g. split.yaml)"
        )
    return data
