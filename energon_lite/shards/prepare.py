"""``prepare``: index the tar shards of a WebDataset folder and write ``.nv-meta``.

One pass over each shard's headers (in parallel processes with ``num_workers``) gives the
``.tar.idx`` offsets, the sample counts and the parts seen. Each index is written (temp file
+ rename) as its shard is scanned; ``.nv-meta`` is assembled in a temporary folder and
renamed into place only after every index and every check, so a folder never looks prepared
with an index missing. ``.nv-meta/energon_lite.json`` records what each shard was
(:mod:`energon_lite.shards.shard_record`). A lock file keeps two prepares of one folder apart
and temporaries of killed prepares are removed (:mod:`energon_lite.shards.folder_lock`).
Remote roots (``s3://``, ``az://``, ``gs://``, ``msc://``) go through
:mod:`energon_lite.storage`. Remote roots, and any prepare with ``executor="ray"``, scan in
journaled batches (:mod:`energon_lite.shards.prepare_cluster`): a prepare that dies part-way
re-scans only the shards it had not finished.

Over 300 lines: the one prepare transaction (lock, scan, checks, index and metadata
commit, for local folders and object-store prefixes) reads best in one place.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from tqdm import tqdm

from energon_lite.errors import ConfigError, DatasetFormatError
from energon_lite.samples.types import SAMPLE_TYPE_NAMES, sample_field_names, sample_type_named
from energon_lite.shards.folder_lock import clean_stale_temporaries, prepare_lock
from energon_lite.shards.meta import (
    INFO_JSON,
    INFO_YAML,
    META_DIR,
    DatasetInfo,
    load_info,
    write_info,
    write_split,
)
from energon_lite.shards.prepare_checks import (
    check_field_access,
    check_required_fields,
    check_unique_keys,
    warn_empty_splits,
)
from energon_lite.shards.prepare_cluster import scan_resumable
from energon_lite.shards.prepare_exclude import (
    Exclusions,
    check_excluded_keys,
    resolve_excludes,
)
from energon_lite.shards.prepare_journal import Journal
from energon_lite.shards.prepare_splits import (
    check_ratio_fills_splits,
    split_by_patterns,
    split_by_ratio,
)
from energon_lite.shards.record_table import TABLE
from energon_lite.shards.shard_record import RECORD, make_record, write_record
from energon_lite.shards.tar_index import ShardScan, scan_shard, write_index
from energon_lite.storage import RemotePath, StoragePath, as_path, is_remote
from energon_lite.storage.ops import downloaded, list_files, write_atomic
from energon_lite.storage.stale import is_stale_temporary

VERSION_TAG = "energon_lite 0.1.0"
REMOTE_WRITERS = 16  # index PUTs in flight at once for a remote prepare


@dataclass
class PrepareReport:
    """What prepare wrote: shards in id order, their counts, parts seen and the splits."""

    root: StoragePath
    shard_names: list[str]
    shard_counts: list[int]
    parts: set[str]
    split_parts: dict[str, list[str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # e.g. a split that got no shard
    excluded: Exclusions = field(default_factory=Exclusions)  # what --exclude left out
    resumed: int = 0  # shards whose scans came from an unfinished prepare's journal

    @property
    def num_samples(self) -> int:
        """Samples in the prepared dataset: excluded shards and samples not counted."""
        return sum(self.shard_counts) - self.excluded.num_samples


def find_shards(root: StoragePath) -> list[str]:
    """Relative paths of the ``.tar`` files under ``root`` (``.nv-meta`` excluded), sorted."""
    return list_files(root, ".tar", skip=META_DIR)  # remotely one listing of the prefix


def _scan(args: tuple[StoragePath, str]) -> ShardScan:
    path, name = args
    with downloaded(path) as local:  # a remote shard: one sequential GET into a temp file
        return scan_shard(local, display_name=name)


def scan_shards(
    root: StoragePath, shards: Sequence[str], num_workers: int, progress: bool
) -> Iterator[ShardScan]:
    """Scans in shard order, each as soon as it (and the ones before it) are done.

    The bar counts a shard before handing it out: a caller that stops asking after the last
    shard (``zip``) never resumes the generator, and the bar would end one shard short."""
    jobs = [(root / name, str(root / name)) for name in shards]
    bar = tqdm(total=len(jobs), desc="indexing shards", unit="shard", disable=not progress)
    try:
        if num_workers <= 1:
            for job in jobs:
                scan = _scan(job)
                bar.update()
                yield scan
            return
        with ProcessPoolExecutor(max_workers=num_workers) as pool:
            # a few shards per task: one round trip per shard costs as much as a small scan
            chunk = max(1, min(16, len(jobs) // (num_workers * 8)))
            for scan in pool.map(_scan, jobs, chunksize=chunk):
                bar.update()
                yield scan
    finally:
        bar.close()


def dataset_yaml(
    sample_type: str | None,
    field_map: dict[str, str] | None,
    sample_loader: str | None,
    part_filter: str | None,
) -> dict[str, Any]:
    if sample_type == "CrudeWebdataset":
        return {"__module__": "megatron.energon", "__class__": "CrudeWebdataset"}
    cls = None if sample_type is None else sample_type_named(sample_type)
    if cls is None:
        raise ConfigError(
            f"--sample-type {sample_type!r} is not a built-in sample type; "
            f"allowed: {sorted(SAMPLE_TYPE_NAMES)} or CrudeWebdataset"
        )
    config: dict[str, Any] = {
        "sample_type": {"__module__": "megatron.energon", "__class__": sample_type}
    }
    if field_map is not None:
        fields = sample_field_names(cls)
        unknown = sorted(set(field_map) - set(fields))
        if unknown:
            raise ConfigError(f"--field-map names {unknown}, not fields of {sample_type}: {fields}")
        check_required_fields(cls.__name__, field_map)
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
    allow_duplicate_keys: bool = False,
    progress: bool = True,
    dataset_yaml_name: str = "dataset.yaml",
    executor: str = "process",
    ray_address: str | None = None,
) -> PrepareReport:
    """Index every shard under ``root`` and write ``.nv-meta`` (see docs/formats.md).

    Every ``.tar.idx`` is written before ``.nv-meta``, which is committed last with one
    rename, so a prepare killed at any point leaves a folder that does not look prepared
    (or the previous, still consistent ``.nv-meta``). One prepare runs per folder at a time:
    a second one fails with :class:`~energon_lite.shards.folder_lock.FolderLockedError`.

    ``exclude``: shard paths (left out of the dataset: not indexed, in no split),
    ``<shard>/<sample key>`` entries (written to ``split.yaml``) or regexes searched in the
    shard paths (Energon's form); an entry that matches nothing is a ConfigError naming the
    nearest shards (:mod:`energon_lite.shards.prepare_exclude`). A ``split_ratio`` that leaves
    a split with a non-zero part without a shard is a ConfigError, raised before any scan.

    ``dataset_yaml_name``: the file the sample type and field map go to (Energon's
    ``--dataset-yaml-name``; load it with ``dataset_config=``); other files in ``.nv-meta``
    are kept. Without a ``sample_type`` (and no field map or sample loader) no dataset.yaml
    is written and an existing one is kept, as Energon's prepare does: the index and the
    splits are prepared, the sample type is written later.

    Remote roots (``s3://``, ``az://``, ``gs://``, ``msc://``) take no lock (object stores
    have no rename); each object is one PUT, indexes are written only once all checks
    passed, ``.info.json`` last.

    ``executor``: ``"process"`` (``num_workers`` local processes) or ``"ray"`` (Ray tasks,
    ``ray_address`` handed to ``ray.init``; see :mod:`energon_lite.shards.prepare_cluster`).
    Remote roots and Ray prepares keep a journal of finished batches until ``.nv-meta`` is
    written; a prepare run again after one that died takes the unchanged shards' scans from
    it (``PrepareReport.resumed`` counts them).
    """
    if "/" in dataset_yaml_name or not dataset_yaml_name.endswith((".yaml", ".yml")):
        raise ConfigError(f"{dataset_yaml_name=} must be a .yaml file name inside .nv-meta")
    root = as_path(root)
    remote = is_remote(root)
    if not root.is_dir():
        raise DatasetFormatError(f"{root}: not a directory")
    config = None
    if not tar_index_only:
        if (split_ratio is None) == (split_parts is None):
            raise ConfigError("give exactly one of --split-ratio and --split-parts")
        if sample_type is not None or field_map is not None or sample_loader is not None:
            if sample_type is None:
                raise ConfigError("--field-map (or a sample_loader) needs --sample-type")
            config = dataset_yaml(sample_type, field_map, sample_loader, part_filter)
    with contextlib.nullcontext() if remote else prepare_lock(root):  # type: ignore[arg-type]
        if isinstance(root, Path):
            _recover_meta(root)
            clean_stale_temporaries(root)
        meta = root / META_DIR
        if is_prepared(root) and not (force_overwrite or tar_index_only):
            raise ConfigError(f"{meta} exists; pass --force-overwrite to prepare {root} again")
        if tar_index_only and is_prepared(root):  # the dataset's shards, as Energon does
            shards = load_info(root).shard_names
        else:
            shards = find_shards(root)
        if not shards:
            raise DatasetFormatError(f"{root}: no .tar shards found (searched recursively)")
        excluded = resolve_excludes(exclude, shards)  # before any shard is read
        left_out = set(excluded.shards)
        shards = [name for name in shards if name not in left_out]
        if split_ratio is not None and not tar_index_only:  # before the scan, too
            check_ratio_fills_splits(
                split_by_ratio(shards, split_ratio, None), split_ratio, len(shards)
            )
        written: list[StoragePath] = []
        journaled = remote or executor != "process"
        resumed = 0
        try:
            scans = []
            if journaled:
                found, resumed = scan_resumable(root, shards, executor=executor,
                                                num_workers=num_workers, address=ray_address,
                                                progress=progress)  # fmt: skip
                in_order: Iterator[ShardScan] = iter(found)
            else:
                in_order = scan_shards(root, shards, num_workers, progress)
            for name, scan in zip(shards, in_order):
                if scan.count == 0:
                    raise DatasetFormatError(
                        f"{root / name}: shard holds no samples; leave it out with --exclude {name}"
                    )
                if not remote:  # not yet "prepared"; remote ones once all checks passed
                    written.append(write_index(root / name, scan.offsets))
                scans.append(scan)
            check_excluded_keys(excluded, shards, scans)
            if not allow_duplicate_keys:
                check_unique_keys(root, shards, scans)
            parts = set().union(*(scan.parts for scan in scans))
            if field_map is not None:
                check_field_map(field_map, parts, root)
                check_field_access(field_map, root, shards[0], scans[0])
        except Exception:
            if not is_prepared(root):  # a failed first prepare leaves no index behind
                for path in written:
                    if isinstance(path, Path):
                        path.unlink(missing_ok=True)
            raise
        if remote:  # one PUT each, several at a time (a round trip each, little work)
            with ThreadPoolExecutor(max_workers=REMOTE_WRITERS) as writers:
                for _ in writers.map(
                    lambda item: write_index(root / item[0], item[1].offsets), zip(shards, scans)
                ):
                    pass
        report = PrepareReport(root, shards, [scan.count for scan in scans], parts)
        report.excluded = excluded
        report.resumed = resumed
        for scan in scans:
            scan.key_hashes = scan.key_hashes[:0]  # free them before the metadata
        record = make_record(root, report.shard_names, scans)
        if tar_index_only:
            if is_prepared(root):
                write_record(meta, record)
            if journaled:
                Journal(root).clear()
            return report
        if split_ratio is not None:
            report.split_parts = split_by_ratio(
                shards, split_ratio, shuffle_seed if shuffle_tars else None
            )
            wanted = {name for name, weight in split_ratio if weight > 0}
        else:
            report.split_parts = split_by_patterns(shards, split_parts or ())
            wanted = set(report.split_parts)
        report.warnings = warn_empty_splits(
            {k: v for k, v in report.split_parts.items() if k in wanted}, len(shards)
        )
        _write_meta(root, report, config, excluded.sample_entries, record, dataset_yaml_name)
        if journaled:
            Journal(root).clear()
    return report


def is_prepared(root: StoragePath) -> bool:
    """``.nv-meta`` has its ``.info.json`` (or legacy ``.info.yaml``)."""
    meta = root / META_DIR
    return (meta / INFO_JSON).is_file() or (meta / INFO_YAML).is_file()


def _recover_meta(root: Path) -> None:
    """A prepare killed between moving the old ``.nv-meta`` aside and renaming the new one
    into place left only ``.nv-meta.old-<pid>``: put it back."""
    if (root / META_DIR).exists():
        return
    for old in sorted(root.glob(f"{META_DIR}.old-*")):
        if old.is_dir() and is_stale_temporary(old.name):
            os.replace(old, root / META_DIR)
            return


def _write_meta(
    root: StoragePath,
    report: PrepareReport,
    config: dict[str, Any] | None,  # None: write no dataset.yaml (an existing one is kept)
    exclude: list[str],
    record: dict[str, Any],
    dataset_yaml_name: str = "dataset.yaml",
) -> None:
    if is_remote(root):  # each object is one PUT; .info.json, read first, last
        write_split(root / META_DIR, report.split_parts, exclude)
        write_record(root / META_DIR, record)
        if config is not None:
            write_atomic(root / META_DIR / dataset_yaml_name, yaml.safe_dump(config, sort_keys=False).encode())  # fmt: skip
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
                    INFO_JSON,
                    INFO_YAML,
                    "split.yaml",
                    dataset_yaml_name if config is not None else None,
                    RECORD,
                    TABLE,
                ):
                    shutil.copy2(item, tmp / item.name)
        write_info(tmp, DatasetInfo(report.shard_names, report.shard_counts, VERSION_TAG))
        write_split(tmp, report.split_parts, exclude)
        if config is not None:
            with open(tmp / dataset_yaml_name, "w", encoding="utf-8") as file:
                yaml.safe_dump(config, file, sort_keys=False)
        write_record(tmp, record)
        old = root / f"{META_DIR}.old-{os.getpid()}"
        if meta.exists():
            os.replace(meta, old)
        os.replace(tmp, meta)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
