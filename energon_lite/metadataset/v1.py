"""Energon's metadataset v1 (``__class__: Metadataset``), read as the v2 ``blend`` it means.

A v1 file::

    __module__: megatron.energon
    __class__: Metadataset
    splits:
      train:
        datasets:
          - weight: 2
            path: ds1            # a dataset folder or a nested metadataset (v1 or v2)
            subflavor: ds1       # legacy: becomes subflavors {"__subflavor__": "ds1"}
            subflavors: {a: 1}
            split_part: train
            shuffle_over_epochs_multiplier: 3

Each split's ``datasets`` list is a weighted blend (``weight`` defaults to 1), so the file is
rewritten into the v2 form (``splits: train: blend: [...]``) and walked by the v2 loader:
weights normalise and multiply down nested files, outer subflavors win, a reference's
``split_part`` wins, exactly as v2. A nested file without ``__class__`` is v1, as in Energon.
"""

from __future__ import annotations

import warnings
from typing import Any

from energon_lite.errors import DatasetFormatError
from energon_lite.storage import StoragePath

ENTRY_KEYS = (
    "path",
    "weight",
    "split_part",
    "subflavor",
    "subflavors",
    "shuffle_over_epochs_multiplier",
    "dataset_config",
    "split_config",
)


def is_v1(data: Any) -> bool:
    """Whether a parsed metadataset file is v1: ``__class__: Metadataset``, or no class with
    splits that list ``datasets``."""
    if not isinstance(data, dict):
        return False
    if data.get("__class__") == "Metadataset":
        return True
    splits = data.get("splits")
    return (
        "__class__" not in data
        and isinstance(splits, dict)
        and any(isinstance(s, dict) and "datasets" in s for s in splits.values())
    )


def v1_as_v2(data: dict[str, Any], path: StoragePath) -> dict[str, Any]:
    """The v2 form of a v1 file (checked; errors name the file and the v1 key path)."""
    unknown = sorted(set(data) - {"__module__", "__class__", "splits"})
    if unknown:
        raise DatasetFormatError(
            f"{path}: unknown top-level keys {unknown}; a v1 metadataset has "
            "__module__, __class__ and splits"
        )
    splits = data.get("splits")
    if not isinstance(splits, dict) or not splits:
        raise DatasetFormatError(f"{path}: splits: needs a mapping of split names to datasets")
    converted = {}
    for name, split in splits.items():
        where = f"{path}: splits.{name}"
        if not isinstance(split, dict) or set(split) != {"datasets"}:
            raise DatasetFormatError(
                f"{where}: a v1 split (__class__: Metadataset) has exactly one key, datasets; "
                "path/blend/blend_epochized need __class__: MetadatasetV2"
            )
        entries = split["datasets"]
        if not isinstance(entries, list) or not entries:
            raise DatasetFormatError(f"{where}.datasets: list at least one dataset")
        converted[name] = {
            "blend": [_entry(e, f"{where}.datasets[{i}]") for i, e in enumerate(entries)]
        }
    return {"__module__": "megatron.energon", "__class__": "MetadatasetV2", "splits": converted}


def _entry(entry: Any, where: str) -> dict[str, Any]:
    if not isinstance(entry, dict) or "path" not in entry:
        raise DatasetFormatError(f"{where}: needs path:; allowed keys: {list(ENTRY_KEYS)}")
    unknown = [k for k in entry if k not in ENTRY_KEYS]
    if unknown:
        raise DatasetFormatError(
            f"{where}.{unknown[0]}: unknown key; allowed: {', '.join(ENTRY_KEYS)}"
        )
    weight = entry.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
        raise DatasetFormatError(f"{where}.weight: {weight!r}; must be a number > 0")
    out = {k: v for k, v in entry.items() if k not in ("subflavor", "weight")}
    out["weight"] = weight
    if "subflavor" in entry:
        warnings.warn(
            f"{where}.subflavor is Energon's deprecated key; write "
            f"subflavors: {{__subflavor__: {entry['subflavor']!r}}} instead",
            DeprecationWarning,
            stacklevel=2,
        )
        subflavors = entry.get("subflavors") or {}
        if not isinstance(subflavors, dict):
            raise DatasetFormatError(f"{where}.subflavors: {subflavors!r}; must be a mapping")
        out["subflavors"] = {"__subflavor__": entry["subflavor"], **subflavors}
    return out
