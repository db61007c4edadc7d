"""Energon's metadataset config objects (``megatron.energon.metadataset.metadataset_v2``):
what ``load_dataset(path).splits`` shows of a ``MetadatasetV2`` file.

Each split of the file becomes the object Energon builds for it, chosen by its keys:
``path`` a :class:`DatasetReference`, ``blend`` a :class:`MetadatasetBlend` of
:class:`BlendDatasetReference` / :class:`BlendJoinDatasetReference`, ``blend_epochized`` a
:class:`MetadatasetBlendEpochized`, ``join`` a :class:`MetadatasetJoin`. Paths are
:class:`~energon_lite.epathlib.EPath` (relative ones resolved against the file's folder,
URLs and ``dss://`` kept), an ``aux`` entry is an :class:`AuxFilesystemReference`
(``filesystem://DIR``, ``filesystem+PROTOCOL://...``) or an :class:`AuxDatasetReference`
(a prepared dataset). These objects describe the file; the loader reads it with
``energon_lite/metadataset/parse.py``, which checks every key.
"""

from __future__ import annotations

import re
from typing import Any

from energon_lite.edataclass import edataclass
from energon_lite.epathlib import EPath
from energon_lite.errors import DatasetFormatError, short_repr

_URL = re.compile(r"^(?P<protocol>[a-z][a-z0-9+.-]*)://(?P<rest>.*)$", re.IGNORECASE)


@edataclass
class AuxDatasetReference:
    """An auxiliary source that is a prepared dataset."""

    path: EPath


@edataclass
class AuxFilesystemReference:
    """An auxiliary source that is a folder of files (``filesystem://``)."""

    fs_path: EPath


@edataclass
class Subset:
    """A subset ``range``: ``[start, end)`` as percentages (``"25%"``) or sample indices."""

    range: tuple[str | int, str | int]


@edataclass
class DatasetReference:
    """A dataset folder or a nested metadataset file."""

    path: EPath
    split_part: str | None = None
    subflavors: dict[str, Any] | None = None
    shuffle_over_epochs_multiplier: int | None = 1
    dataset_config: str | None = None
    split_config: str | None = None
    aux: dict[str, AuxDatasetReference | AuxFilesystemReference] | None = None
    subset: Subset | None = None


@edataclass
class JoinDatasetReference(DatasetReference):
    """One dataset of a join; ``nonmatch``: what a sample without a partner does."""

    nonmatch: str = "error"


@edataclass
class MetadatasetJoin:
    """Datasets joined sample by sample (``joiner`` as written in the file)."""

    join: list[JoinDatasetReference] | dict[str, JoinDatasetReference]
    joiner: Any
    split_part: str | None = None
    subflavors: dict[str, Any] | None = None
    shuffle_over_epochs_multiplier: int | None = 1
    dataset_config: str | None = None
    split_config: str | None = None
    subset: Subset | None = None


@edataclass
class BlendDatasetReference(DatasetReference):
    weight: Any = 1.0  # a number, or a schedule as written


@edataclass
class BlendJoinDatasetReference(MetadatasetJoin):
    weight: Any = 1.0


@edataclass
class BlendEpochizedDatasetReference(DatasetReference):
    repetitions: int | float = 1


@edataclass
class BlendEpochizedJoinDatasetReference(MetadatasetJoin):
    repetitions: int | float = 1


@edataclass
class MetadatasetBlend:
    blend: list[BlendDatasetReference | BlendJoinDatasetReference]
    subset: Subset | None = None


@edataclass
class MetadatasetBlendEpochized:
    blend_epochized: list[BlendEpochizedDatasetReference | BlendEpochizedJoinDatasetReference]
    subset: Subset | None = None


SplitConfig = MetadatasetBlend | MetadatasetBlendEpochized | MetadatasetJoin | DatasetReference

_REFERENCE_KEYS = (
    "split_part",
    "subflavors",
    "shuffle_over_epochs_multiplier",
    "dataset_config",
    "split_config",
)


def parse_splits(data: Any, mds_path: EPath) -> dict[str, SplitConfig]:
    """The config object of each split of a MetadatasetV2 file's parsed YAML ``data``."""
    splits = data.get("splits") if isinstance(data, dict) else None
    if not isinstance(splits, dict):
        raise DatasetFormatError(f"{mds_path}: needs a mapping 'splits'")
    return {str(name): _split(node, mds_path, f"splits.{name}") for name, node in splits.items()}


def _split(node: Any, mds_path: EPath, where: str) -> SplitConfig:
    if isinstance(node, dict) and "blend" in node:
        entries = _entries(node["blend"], mds_path, f"{where}.blend", "weight")
        return MetadatasetBlend(blend=entries, subset=_subset(node, mds_path, where))
    if isinstance(node, dict) and "blend_epochized" in node:
        where = f"{where}.blend_epochized"
        entries = _entries(node["blend_epochized"], mds_path, where, "repetitions")
        return MetadatasetBlendEpochized(
            blend_epochized=entries, subset=_subset(node, mds_path, where)
        )
    if isinstance(node, dict) and "join" in node:
        return MetadatasetJoin(**_join_fields(node, mds_path, where))
    if isinstance(node, dict) and "path" in node:
        return DatasetReference(**_reference_fields(node, mds_path, where))
    raise DatasetFormatError(
        f"{mds_path}: {where}: {short_repr(node)}; needs one of path, blend, "
        "blend_epochized or join"
    )


def _entries(items: Any, mds_path: EPath, where: str, number: str) -> list[Any]:
    if not isinstance(items, list):
        raise DatasetFormatError(f"{mds_path}: {where}: {short_repr(items)}; must be a list")
    blend = number == "weight"
    out: list[Any] = []
    for n, item in enumerate(items):
        at = f"{where}[{n}]"
        extra = {number: item[number]} if isinstance(item, dict) and number in item else {}
        if isinstance(item, dict) and "join" in item:
            kind: Any = BlendJoinDatasetReference if blend else BlendEpochizedJoinDatasetReference
            out.append(kind(**_join_fields(item, mds_path, at), **extra))
        elif isinstance(item, dict) and "path" in item:
            kind = BlendDatasetReference if blend else BlendEpochizedDatasetReference
            out.append(kind(**_reference_fields(item, mds_path, at), **extra))
        else:
            raise DatasetFormatError(
                f"{mds_path}: {at}: {short_repr(item)}; needs a path (or a join)"
            )
    return out


def _reference_fields(node: dict[str, Any], mds_path: EPath, where: str) -> dict[str, Any]:
    fields = {key: node[key] for key in _REFERENCE_KEYS if key in node}
    fields["path"] = _path(node["path"], mds_path, f"{where}.path")
    if node.get("aux") is not None:
        fields["aux"] = _aux(node["aux"], mds_path, f"{where}.aux")
    fields["subset"] = _subset(node, mds_path, where)
    return fields


def _join_fields(node: dict[str, Any], mds_path: EPath, where: str) -> dict[str, Any]:
    fields = {key: node[key] for key in _REFERENCE_KEYS if key in node}
    join = node["join"]

    def ref(item: Any, at: str) -> JoinDatasetReference:
        if not isinstance(item, dict) or "path" not in item:
            raise DatasetFormatError(f"{mds_path}: {at}: {short_repr(item)}; needs a path")
        extra = {"nonmatch": item["nonmatch"]} if "nonmatch" in item else {}
        return JoinDatasetReference(**_reference_fields(item, mds_path, at), **extra)

    if isinstance(join, dict):
        fields["join"] = {str(k): ref(v, f"{where}.join.{k}") for k, v in join.items()}
    elif isinstance(join, list):
        fields["join"] = [ref(v, f"{where}.join[{n}]") for n, v in enumerate(join)]
    else:
        raise DatasetFormatError(
            f"{mds_path}: {where}.join: {short_repr(join)}; must be a list or a mapping"
        )
    fields["joiner"] = node.get("joiner")
    fields["subset"] = _subset(node, mds_path, where)
    return fields


def _path(raw: Any, mds_path: EPath, where: str) -> EPath:
    if not isinstance(raw, str) or not raw:
        raise DatasetFormatError(f"{mds_path}: {where}: {short_repr(raw)}; must be a path")
    return mds_path.parent / raw  # an absolute path or a URL stays as it is


def _aux(value: Any, mds_path: EPath, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DatasetFormatError(f"{mds_path}: {where}: {short_repr(value)}; must be a mapping")
    out: dict[str, AuxDatasetReference | AuxFilesystemReference] = {}
    for name, spec in value.items():
        if not isinstance(spec, str) or not spec:
            raise DatasetFormatError(f"{mds_path}: {where}.{name}: {short_repr(spec)}")
        url = _URL.match(spec)
        protocol = url.group("protocol").lower() if url else ""
        if protocol.startswith("filesystem+") and url:  # filesystem+dss://..., filesystem+s3://
            inner = f"{protocol.removeprefix('filesystem+')}://{url.group('rest')}"
            out[name] = AuxFilesystemReference(fs_path=EPath(inner))
        elif protocol == "filesystem" and url:
            out[name] = AuxFilesystemReference(fs_path=mds_path.parent / url.group("rest"))
        else:
            out[name] = AuxDatasetReference(path=mds_path.parent / spec)
    return out


def _subset(node: dict[str, Any], mds_path: EPath, where: str) -> Subset | None:
    subset = node.get("subset")
    if subset is None:
        return None
    span = subset.get("range") if isinstance(subset, dict) else None
    if not isinstance(span, (list, tuple)) or len(span) != 2:
        raise DatasetFormatError(
            f"{mds_path}: {where}.subset: {short_repr(subset)}; needs range: [start, end]"
        )
    return Subset(range=(span[0], span[1]))
