"""``prepare``: index the tar shards of a WebDataset folder and write ``.nv-meta``.

One pass over each shard's headers (in parallel processes with ``num_workers``) gives the
``.tar.idx`` offsets, the sample counts and the parts seen. Nothing is written until every
shard has been read without error; ``.nv-meta`` is assembled in a temporary folder and
renamed into place, so a failure leaves no half-written metadata behind.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml
from tqdm import tqdm

from energon_lite.errors import ConfigError, DatasetFormatError
from energon_lite.index.meta import META_DIR, DatasetInfo, expand, write_info, write_split
from energon_lite.index.tar_index import ShardScan, scan_shard, write_index
from energon_lite.samples import SAMPLE_TYPES, sample_field_names
from energon_lite.storage import RemotePath, StoragePath, as_path
from energon_lite.storage.ops import downloaded, list_files, write_atomic

VERSION_TAG = "energon_lite 0.1.0"


@dataclass
class PrepareReport:
    """What prepare wrote: shards in id order, their counts, parts seen and the splits."""

    root: StoragePath
    shard_names: list[str]
    shard_counts: list[int]
    parts: set[str]
    split_parts: dict[str, list[str]] = field(default_factory=dict)

    @property
    def num_samples(self) -> int:
        return sum(self.shard_counts)


def find_shards(root: StoragePath) -> list[str]:
    """Relative paths of the ``.tar`` files under ``root`` (``.nv-meta`` excluded), sorted."""
    if isinstance(root, RemotePath):  # one listing of the prefix
        return [n for n in list_files(root, ".tar") if not n.startswith(META_DIR)]
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(META_DIR))
        for name in filenames:
            if name.endswith(".tar"):
                found.append(Path(dirpath, name).relative_to(root).as_posix())
    return sorted(found)


def _scan(args: tuple[StoragePath, str]) -> ShardScan:
    path, name = args
    with downloaded(path) as local:  # a remote shard: one sequential GET into a temp file
        return scan_shard(local, display_name=name)


def scan_shards(
    root: StoragePath, shards: Sequence[str], num_workers: int, progress: bool
) -> list[ShardScan]:
    jobs = [(root / name, str(root / name)) for name in shards]
    bar = tqdm(total=len(jobs), desc="indexing shards", unit="shard", disable=not progress)
    try:
        if num_workers <= 1:
            scans = []
            for job in jobs:
                scans.append(_scan(job))
                bar.update()
            return scans
        with ProcessPoolExecutor(max_workers=num_workers) as pool:
            scans = []
            for scan in pool.map(_scan, jobs, chunksize=1):
                scans.append(scan)
                bar.update()
            return scans
    finally:
        bar.close()


def split_by_ratio(
    shards: list[str], ratio: Sequence[tuple[str, float]], shuffle_seed: int | None
) -> dict[str, list[str]]:
    """Whole shards per split: cumulative ratio boundaries in exact arithmetic."""
    if not ratio or any(r < 0 for _, r in ratio) or sum(r for _, r in ratio) <= 0:
        raise ConfigError(f"split ratio {list(ratio)} needs non-negative parts with a positive sum")
    order = list(shards)
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(order)
    fractions = [Fraction(r).limit_denominator(10**6) for _, r in ratio]
    total = sum(fractions)
    out, cumulative, start = {}, Fraction(0), 0
    for (name, _), part in zip(ratio, fractions):
        cumulative += part
        end = int(len(order) * cumulative / total)
        out[name] = order[start:end]
        start = end
    return out


def split_by_patterns(
    shards: list[str], patterns: Sequence[tuple[str, str]]
) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, pattern in patterns:
        try:
            regexes = [re.compile(p) for p in expand(pattern)]
        except re.error as exc:
            raise ConfigError(f"--split-parts {name}:{pattern!r}: invalid regex: {exc}") from None
        out.setdefault(name, []).extend(s for s in shards if any(r.match(s) for r in regexes))
    return out


def dataset_yaml(
    sample_type: str | None,
    field_map: dict[str, str] | None,
    sample_loader: str | None,
    part_filter: str | None,
) -> dict[str, Any]:
    if sample_type == "CrudeWebdataset":
        return {"__module__": "megatron.energon", "__class__": "CrudeWebdataset"}
    if sample_type not in SAMPLE_TYPES:
        raise ConfigError(
            f"--sample-type {sample_type!r} is not a built-in sample type; "
            f"allowed: {sorted(SAMPLE_TYPES)} or CrudeWebdataset"
        )
    config: dict[str, Any] = {
        "sample_type": {"__module__": "megatron.energon", "__class__": sample_type}
    }
    if field_map is not None:
        fields = sample_field_names(SAMPLE_TYPES[sample_type])
        unknown = sorted(set(field_map) - set(fields))
        if unknown:
            raise ConfigError(f"--field-map names {unknown}, not fields of {sample_type}: {fields}")
        config["field_map"] = dict(field_map)
    elif sample_loader is not None:
        config["sample_loader"] = sample_loader
        if part_filter is not None:
            config["part_filter"] = part_filter
    else:
        raise ConfigError(f"--sample-type {sample_type} needs --field-map (or a sample_loader)")
    return config


def check_field_map(field_map: dict[str, str], parts: set[str], root: StoragePath) -> None:
    """Every field must name a part that at least one sample has."""
    for field_name, spec in field_map.items():
        part = spec.split("[", 1)[0]
        if part not in parts:
            raise DatasetFormatError(
                f"{root}: field_map[{field_name!r}] = {spec!r} names part {part!r}, "
                f"which no sample has; parts seen: {sorted(parts)}"
            )


def prepare_dataset(
    root: str | os.PathLike[str] | RemotePath,
    *,
    split_ratio: Sequence[tuple[str, float]] | None = None,
    split_parts: Sequence[tuple[str, str]] | None = None,
    sample_type: str | None = None,
    field_map: dict[str, str] | None = None,
    sample_loader: str | None = None,
    part_filter: str | None = None,
    exclude: Sequence[str] = (),
    num_workers: int = 1,
    shuffle_tars: bool = False,
    shuffle_seed: int = 42,
    tar_index_only: bool = False,
    force_overwrite: bool = False,
    progress: bool = True,
) -> PrepareReport:
    """Index every shard under ``root`` and write ``.nv-meta`` (see docs/formats.md)."""
    root = as_path(root)
    if not root.is_dir():
        raise DatasetFormatError(f"{root}: not a directory")
    meta = root / META_DIR
    if meta.exists() and not (force_overwrite or tar_index_only):
        raise ConfigError(f"{meta} exists; pass --force-overwrite to prepare {root} again")
    shards = find_shards(root)
    if not shards:
        raise DatasetFormatError(f"{root}: no .tar shards found (searched recursively)")
    config = None
    if not tar_index_only:
        if (split_ratio is None) == (split_parts is None):
            raise ConfigError("give exactly one of --split-ratio and --split-parts")
        config = dataset_yaml(sample_type, field_map, sample_loader, part_filter)

    scans = scan_shards(root, shards, num_workers, progress)
    empty = [name for name, scan in zip(shards, scans) if scan.count == 0]
    if empty:
        raise DatasetFormatError(f"{root / empty[0]}: shard holds no samples")
    parts = set().union(*(scan.parts for scan in scans))
    if field_map is not None:
        check_field_map(field_map, parts, root)
    report = PrepareReport(root, shards, [scan.count for scan in scans], parts)
    for name, scan in zip(shards, scans):  # indexes first: the metadata names them last
        write_index(root / name, scan.offsets)
    if not tar_index_only:
        if split_ratio is not None:
            report.split_parts = split_by_ratio(
                shards, split_ratio, shuffle_seed if shuffle_tars else None
            )
        else:
            report.split_parts = split_by_patterns(shards, split_parts or ())
        _write_meta(root, report, config or {}, list(exclude))
    return report


def _write_meta(
    root: StoragePath, report: PrepareReport, config: dict[str, Any], exclude: list[str]
) -> None:
    if isinstance(root, RemotePath):  # each object is one PUT; .info.json, read first, last
        write_split(root / META_DIR, report.split_parts, exclude)
        write_atomic(root / META_DIR / "dataset.yaml", yaml.safe_dump(config, sort_keys=False).encode())  # fmt: skip
        write_info(root / META_DIR, DatasetInfo(report.shard_names, report.shard_counts, VERSION_TAG))  # fmt: skip
        return
    meta = root / META_DIR
    tmp = root / f"{META_DIR}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        if meta.is_dir():  # keep files we do not write (custom split configs, Energon's sqlite)
            for item in meta.iterdir():
                if item.is_file() and item.name not in (
                    ".info.json",
                    ".info.yaml",
                    "split.yaml",
                    "dataset.yaml",
                ):
                    shutil.copy2(item, tmp / item.name)
        write_info(tmp, DatasetInfo(report.shard_names, report.shard_counts, VERSION_TAG))
        write_split(tmp, report.split_parts, exclude)
        with open(tmp / "dataset.yaml", "w", encoding="utf-8") as file:
            yaml.safe_dump(config, file, sort_keys=False)
        old = root / f"{META_DIR}.old-{os.getpid()}"
        if meta.exists():
            os.replace(meta, old)
        os.replace(tmp, meta)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
