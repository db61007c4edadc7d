"""What ``prepare`` checks in the data before it commits ``.nv-meta``.

* a field map must map every field the sample type requires (Energon's sample types declare
  them without a default), name parts that samples have, and its ``json[key][0]`` accesses
  must resolve in a real sample;
* a sample key may appear in one shard only (a key in two shards is delivered twice);
* a split that gets no shard is reported, since loading it later fails.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from energon_lite.errors import ConfigError, DatasetFormatError, logger
from energon_lite.shards.tar import first_member_name, parse_sample, split_name
from energon_lite.shards.tar_index import ShardScan
from energon_lite.storage import ShardFile, StoragePath

# The fields Energon's sample types declare without a default: a field map must give them.
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "TextSample": ("text",),
    "ImageSample": ("image",),
    "CaptioningSample": ("image", "caption"),
    "ImageClassificationSample": ("image",),
    "VQASample": ("image", "context"),
    "VidQASample": ("video", "context"),
    "InterleavedSample": ("sequence",),
}


def check_required_fields(sample_type: str, field_map: dict[str, str]) -> None:
    missing = [f for f in REQUIRED_FIELDS.get(sample_type, ()) if f not in field_map]
    if missing:
        raise ConfigError(
            f"--field-map {json.dumps(field_map)} leaves {missing} of {sample_type} unmapped; "
            f"{sample_type} needs {list(REQUIRED_FIELDS[sample_type])} (e.g. "
            + ", ".join(f'"{f}": "<part>"' for f in missing)
            + ")"
        )


def _access(value: Any, path: list[str], spec: str, where: str) -> None:
    for depth, step in enumerate(path):
        shown = "".join(f"[{s}]" for s in path[:depth])
        if isinstance(value, dict):
            if step not in value:
                raise DatasetFormatError(
                    f"{where}: field_map value {spec!r}: the part{shown} has no key {step!r}; "
                    f"its keys: {sorted(value)[:20]}"
                )
            value = value[step]
        elif isinstance(value, list):
            if not step.lstrip("-").isdigit() or not -len(value) <= int(step) < len(value):
                raise DatasetFormatError(
                    f"{where}: field_map value {spec!r}: the part{shown} is a list of "
                    f"{len(value)} items; {step!r} is not an index into it"
                )
            value = value[int(step)]
        else:
            raise DatasetFormatError(
                f"{where}: field_map value {spec!r}: the part{shown} is a "
                f"{type(value).__name__}, which cannot be indexed with [{step}]"
            )


def check_field_access(
    field_map: dict[str, str], root: StoragePath, shard: str, scan: ShardScan
) -> None:
    """Resolve every ``part[key]...`` access of the field map in the shard's first sample."""
    accesses = {f: spec for f, spec in field_map.items() if "[" in spec}
    if not accesses:
        return
    offsets = scan.offsets
    file = ShardFile(root / shard)
    try:
        buf = file.pread(int(offsets[1]) - int(offsets[0]), int(offsets[0]))
    finally:
        file.close()
    key, parts = parse_sample(memoryview(buf), int(offsets[0]), str(root / shard))
    where = f"{root / shard}: sample {key!r}"
    for spec in accesses.values():
        part, _, rest = spec.partition("[")
        path = [s.strip("'\"") for s in rest.rstrip("]").split("][")]
        if part not in parts:
            continue  # the part check (over all samples) already ran; this sample lacks it
        try:
            value = json.loads(parts[part])
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DatasetFormatError(
                f"{where}: field_map value {spec!r} indexes part {part!r}, which is not "
                f"JSON ({exc}); [key] access works on .json parts"
            ) from None
        _access(value, path, spec, where)


def check_unique_keys(root: StoragePath, shards: list[str], scans: list[ShardScan]) -> None:
    """Refuse a sample key present in two shards, naming the key and both shards.

    Memory: the 8-byte key hashes of all samples and one sorted copy (160 MB for 10M
    samples); keys are read back by name only for hashes that repeat.
    """
    if len(scans) < 2:
        return
    hashes = np.concatenate([scan.key_hashes for scan in scans])
    ordered = np.sort(hashes)
    repeated = np.unique(ordered[1:][ordered[1:] == ordered[:-1]])
    del ordered
    if len(repeated) == 0:
        return
    starts = np.concatenate([[0], np.cumsum([len(s.key_hashes) for s in scans])])
    positions = np.flatnonzero(np.isin(hashes, repeated))
    by_hash: dict[int, list[int]] = {}
    for position in positions.tolist():
        by_hash.setdefault(int(hashes[position]), []).append(position)
    for group in list(by_hash.values())[:100]:  # confirm by name (64-bit hashes can collide)
        first: dict[str, int] = {}
        for b in group:
            key = _key_at(root, shards, scans, starts, b)
            a = first.setdefault(key, b)
            if a != b:
                shard_a, shard_b = (
                    int(np.searchsorted(starts, x, side="right")) - 1 for x in (a, b)
                )
                raise DatasetFormatError(
                    f"{root}: sample key {key!r} is in two shards, {shards[shard_a]} and "
                    f"{shards[shard_b]} ({len(repeated)} repeated key(s) in all): its samples "
                    "would be delivered twice; give every sample a unique key, or exclude one "
                    "shard"
                )


def _key_at(
    root: StoragePath, shards: list[str], scans: list[ShardScan], starts: Any, p: int
) -> str:
    """The key of the ``p``-th sample over all shards (one header read)."""
    shard = int(np.searchsorted(starts, p, side="right")) - 1
    offset = int(scans[shard].offsets[p - int(starts[shard])])
    path = root / shards[shard]
    file = ShardFile(path)
    try:
        name = first_member_name(file, offset, str(path))
    finally:
        file.close()
    split = split_name(name)
    return split[0] if split else name


def warn_empty_splits(split_parts: dict[str, list[str]], num_shards: int) -> list[str]:
    """Log (and return) one warning per split that received no shard."""
    warnings = []
    for name, shards in split_parts.items():
        if not shards:
            message = (
                f"split {name!r} gets no shard: {num_shards} shard(s) are split by whole "
                f"shards; loading split {name!r} will fail. Use --split-parts to choose "
                "shards per split, or write the data into more shards"
            )
            logger.warning("%s", message)
            warnings.append(message)
    return warnings
