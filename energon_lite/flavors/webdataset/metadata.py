"""``WebdatasetMeta`` (Energon's): the shards and excluded samples of one split part, read
from a prepared dataset's ``.nv-meta`` folder."""

from __future__ import annotations

from typing import Any

from energon_lite.edataclass import edataclass
from energon_lite.epathlib import EPath
from energon_lite.flavors.webdataset.empty_dataset_error import EmptyDatasetError
from energon_lite.shards.metadata import dataset_metadata


@edataclass
class ShardInfo:
    """One shard of a split part: its name in the info file, its path and sample count."""

    name: str
    path: EPath
    count: int


@edataclass
class WebdatasetMeta:
    """The shards of a split part (excluded shards left out), the excluded samples
    (``"<shard>/<sample>"`` entries of the split file), the part's shard names and every shard the dataset has."""

    sample_excludes: set[str]
    shards: list[ShardInfo]
    split_part_files: list[str]
    info_shard_files: list[str]

    @staticmethod
    def from_config(
        path: EPath | Any, *, split_part: str, split_config: str | None = None
    ) -> WebdatasetMeta:
        """Read ``split_config`` (default ``split.yaml``, or ``split.json``) and the info file.
        An unknown part is a KeyError naming it; a part without shards an EmptyDatasetError."""
        root = EPath(path)
        meta = dataset_metadata(root)  # read once per process
        info = meta.info()
        split = meta.split(split_config or "split.yaml")
        if split_part not in split.split_parts:
            raise KeyError(
                f"{split.source}: no split part {split_part!r}; it has {sorted(split.split_parts)}"
            )
        excludes = set(split.exclude)
        names = split.split_parts[split_part]
        counts = dict(zip(info.shard_names, info.shard_counts))
        kept = [name for name in names if name not in excludes]
        if not kept:
            raise EmptyDatasetError(f"{split.source}: no shards found in split part {split_part!r}")
        return WebdatasetMeta(
            sample_excludes={name for name in excludes if "/" in name},
            shards=[ShardInfo(name=n, path=root / n, count=counts.get(n, 0)) for n in kept],
            split_part_files=names,
            info_shard_files=list(info.shard_names),
        )
