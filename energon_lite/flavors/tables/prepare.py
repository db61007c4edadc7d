"""``energon-lite prepare`` of a table-format folder: writes ``.nv-meta`` only, never the data.

It writes ``dataset.yaml`` (the sample type and field map, or the crude config) and the
format's marker ``.nv-meta/<format>.json`` (the format and its split names; how the folder
is recognised on object storage). Before writing it opens every split and builds a typed
sample from its first row, so a field map naming a missing column fails here, naming it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from energon_lite.decode import SampleDecoder
from energon_lite.errors import ConfigError
from energon_lite.flavors.tables.layout import marker, split_names
from energon_lite.flavors.tables.source import TableSource
from energon_lite.samples.factory import PART_TYPES, SampleFactory
from energon_lite.shards.meta import META_DIR
from energon_lite.shards.prepare import dataset_yaml
from energon_lite.state.restore_key import SampleKey
from energon_lite.storage.ops import write_atomic


def prepare_table(path: Path, format_name: str, options: Mapping[str, Any]) -> str:
    """Write ``.nv-meta`` for the folder ``path`` of ``format_name``; a one-line report each."""
    if path.is_file():
        raise ConfigError(
            f"{path}: prepare a folder (its .nv-meta goes beside the data); a single "
            f"{format_name} file is read as it is, crude"
        )
    for flag in ("split_ratio", "split_parts", "exclude"):
        if options.get(flag):
            raise ConfigError(
                f"--{flag.replace('_', '-')}: a {format_name} folder's splits are its own "
                f"({split_names(path, format_name)}); remove the flag"
            )
    raw_map = options.get("field_map")
    field_map = json.loads(raw_map) if isinstance(raw_map, str) else raw_map
    sample_type = options.get("sample_type") or "CrudeWebdataset"
    config = dataset_yaml(sample_type, field_map, None, None)
    name = options.get("dataset_yaml_name") or "dataset.yaml"
    meta = path / META_DIR
    if (meta / name).is_file() and not options.get("force_overwrite"):
        raise ConfigError(f"{meta / name} exists; give --force-overwrite to replace it")
    splits = split_names(path, format_name)
    lines = []
    for split in splits:
        source = TableSource(path, split, format_name=format_name)
        source.config = {**config, PART_TYPES: source.table.types}
        _check_first_row(source, meta)
        lines.append(f"  split {split}: {len(source)} rows in {len(source.shard_names)} files")
    meta.mkdir(exist_ok=True)
    write_atomic(meta / name, yaml.safe_dump(config, sort_keys=False).encode())
    record = {"format": format_name, "version": 1, "splits": splits}
    write_atomic(path / marker(format_name), json.dumps(record, indent=1).encode())
    kind = config.get("sample_type", config).get("__class__")
    return "\n".join(
        [f"Prepared {format_name} folder {path} as {kind} (wrote {META_DIR}/ only)", *lines, "Done"]
    )


def _check_first_row(source: TableSource, meta: Path) -> None:
    """Build the typed sample of the first row: a missing column fails here, named."""
    if not len(source):
        return
    shard, row = int(source.run_shard[0]), int(source.run_start[0])
    key, parts = source.read(shard, row)
    raw = {"__key__": key, "__restore_key__": SampleKey(0, shard, row, 0), **parts}
    SampleFactory(source.config, meta).build(raw, SampleDecoder(), None)
