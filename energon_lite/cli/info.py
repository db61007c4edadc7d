"""What the ``info``, ``preview``, ``lint`` and ``checkpoint info`` commands print."""

from __future__ import annotations

import dataclasses
import itertools
import os
import typing
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from energon_lite.cli.words import count
from energon_lite.errors import ConfigError, EnergonLiteError, StateError, short_repr
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.shards.meta import META_DIR, load_dataset_config, load_info, load_split
from energon_lite.sources.base import Source
from energon_lite.sources.kinds import TAR_FOLDER, DatasetKind, kind_of, resolve_path
from energon_lite.state.restore_key import SampleKey
from energon_lite.storage import RemotePath, StoragePath, as_path, ops


def _open(root: StoragePath, split_part: str) -> Source:
    """One split of a prepared dataset of any kind that opens as a source."""
    kind = kind_of(root)
    assert kind.open is not None  # callers handle kinds without a source first
    return kind.open(
        root, split_part, split_config="split.yaml", dataset_config="dataset.yaml", subset=None
    )


def _positions(source: Source) -> Iterator[tuple[int, int]]:
    """``(shard_id, index)`` of the split's samples, in order."""
    for run in range(len(source.run_shard)):
        shard_id = int(source.run_shard[run])
        for index in range(int(source.run_start[run]), int(source.run_end[run])):
            yield shard_id, index


def _local(path: StoragePath) -> Path:
    """Kinds other than the tar folder read local files only (remote paths are tar folders)."""
    assert isinstance(path, Path), path
    return path


def _not_openable(kind: DatasetKind, command: str) -> EnergonLiteError:
    return ConfigError(f"`energon-lite {command}` does not know {kind.name} datasets yet")


def dataset_info(root: str | os.PathLike[str] | RemotePath) -> str:
    """Counts per split, bytes, sample type, field map and the parts of the first samples."""
    given, kind = as_path(root), kind_of(root)
    if kind.open is None:
        if kind.describe is None:
            raise _not_openable(kind, "info")
        return "\n".join(kind.describe(_local(given)))
    root = resolve_path(given)
    if kind.splits is not None:
        return "\n".join(_splits_info(given, kind, root))
    info = load_info(root)
    split = load_split(root)
    config = load_dataset_config(root)
    counts = dict(zip(info.shard_names, info.shard_counts))
    size = sum(ops.size(root / name) for name in info.shard_names if (root / name).exists())
    # samples excluded by key stay in their shard's count: not counted here, as prepare does
    dropped = Counter(e.partition(".tar/")[0] + ".tar" for e in set(split.exclude) if ".tar/" in e)
    total = sum(n - dropped.get(name, 0) for name, n in counts.items())
    lines = [
        f"dataset {given}",
        f"  total: {count(total, 'sample')}, {count(len(info.shard_names), 'shard')}, "
        f"{size / 1e6:.1f} MB",
    ]
    if kind.describe is not None:
        lines.extend(kind.describe(_local(given)))
    for name, shards in split.split_parts.items():
        kept = [s for s in shards if s not in split.exclude]
        samples = sum(counts.get(s, 0) - dropped.get(s, 0) for s in kept)
        lines.append(f"  split {name}: {count(samples, 'sample')} in {count(len(shards), 'shard')}")
    if split.exclude:
        lines.append(f"  excluded: {len(split.exclude)} entries")
    sample_type = config.get("sample_type", {}).get("__class__") or config.get("__class__")
    lines.append(f"  sample type: {sample_type}")
    if "field_map" in config:
        lines.append(
            "  field map: " + ", ".join(f"{k} <- {v}" for k, v in config["field_map"].items())
        )
    if "sample_loader" in config:
        lines.append(f"  sample loader: {config['sample_loader']}")
    first_split = next((s for s, shards in split.split_parts.items() if shards), None)
    if first_split is not None:
        dataset = _open(root, first_split)
        parts: set[str] = set()
        for run in range(min(len(dataset.run_shard), 100)):
            _, sample = dataset.read(int(dataset.run_shard[run]), int(dataset.run_start[run]))
            parts.update(sample)
        lines.append(f"  parts (first sample of up to 100 shards): {', '.join(sorted(parts))}")
    return "\n".join(lines)


def _summary(value: Any) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"{type(value).__name__}{tuple(shape)} {getattr(value, 'dtype', '')}".strip()
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def preview(
    root: str | os.PathLike[str] | RemotePath, split_part: str = "train", num: int = 5
) -> list[str]:
    """One line per field of the first ``num`` samples of a split."""
    kind = kind_of(root)
    if kind.open is None:
        if kind.preview is None:
            raise _not_openable(kind, "preview")
        return kind.preview(_local(as_path(root)), split_part, num)
    return preview_source(_open(resolve_path(root), split_part), num)


def _splits_info(given: StoragePath, kind: DatasetKind, root: StoragePath) -> list[str]:
    """``info`` of a kind whose splits are its own layout's: each split opened."""
    assert kind.splits is not None
    lines = [f"dataset {given} ({kind.name})"]
    config: dict[str, Any] = {}
    parts: set[str] = set()
    for name in kind.splits(root):
        source = _open(root, name)
        config = source.config
        lines.append(f"  split {name}: {len(source)} samples in {len(source.shard_names)} files")
        if len(source) and not parts:
            parts.update(source.read(int(source.run_shard[0]), int(source.run_start[0]))[1])
    sample_type = config.get("sample_type", {}).get("__class__") or config.get("__class__")
    lines.append(f"  sample type: {sample_type}")
    if "field_map" in config:
        lines.append(
            "  field map: " + ", ".join(f"{k} <- {v}" for k, v in config["field_map"].items())
        )
    lines.append(f"  columns (first sample): {', '.join(sorted(parts))}")
    return lines


def _decoding(source: Source) -> tuple[Any, Any]:
    """The sample factory and decoder of a source (imported here: they need torch, which
    ``info`` does not)."""
    from energon_lite.decode import SampleDecoder
    from energon_lite.samples.factory import SampleFactory

    return SampleFactory(source.config, source.root / META_DIR), SampleDecoder()


def preview_source(
    dataset: Source, num: int = 5, subflavors: dict[str, Any] | None = None
) -> list[str]:
    """One line per field of the first ``num`` samples of an opened split."""
    factory, decoder = _decoding(dataset)
    lines = []
    for shard_id, index in itertools.islice(_positions(dataset), num):
        key, parts = dataset.read(shard_id, index)
        raw = {
            "__key__": key,
            "__restore_key__": SampleKey(0, shard_id, index, 0),
            "__shard__": dataset.shard_names[shard_id],  # errors name it
            **parts,
        }
        sample = factory.build(raw, decoder, subflavors)
        lines.append(f"{dataset.shard_names[shard_id]} #{index} {key}")
        if isinstance(sample, dict):  # a crude sample: no declared field types
            items = sample.items()
            lines.extend(f"    {k}: {_summary(v)}" for k, v in items if not k.startswith("__"))
            continue
        hints = _field_types(type(sample))
        for field in dataclasses.fields(sample):
            if field.name.startswith("__") and field.name != "__key__":
                continue  # as Energon's preview: the key, then the sample's own fields
            kind = hints.get(field.name, field.type)
            lines.append(f"    {field.name} ({kind}): {_summary(getattr(sample, field.name))}")
    return lines


def _field_types(cls: type) -> dict[str, Any]:
    """The declared type of each field, as Energon's preview prints it (``<class 'str'>``);
    the annotation's text where it cannot be resolved."""
    import torch  # the built-in types' tensor fields name it (a preview makes tensors anyway)

    try:
        return typing.get_type_hints(cls, localns={"torch": torch})
    except (NameError, TypeError, AttributeError):  # a loader class naming types it never imports
        return {}


def lint(
    root: str | os.PathLike[str] | RemotePath,
    progress: bool = True,
    split_parts: Sequence[str] | None = None,
) -> list[str]:
    """Decode every sample of every split (or of ``split_parts``); one line per failure.

    A split that cannot be opened (a changed shard, a shard listed twice) is one problem; a
    shard in two splits is one too. Video-text tables also get their media checked, robot
    episodes every frame decoded.
    """
    given, kind = as_path(root), kind_of(root)
    if kind.open is None:
        if kind.lint is None:
            raise _not_openable(kind, "lint")
        return kind.lint(_local(given), progress)
    root = resolve_path(given)
    problems = kind.lint(_local(given), progress) if kind.lint is not None else []
    if kind.splits is not None:
        for split_part in split_parts or kind.splits(root):
            problems.extend(lint_source(_open(root, split_part), split_part, progress))
        return problems
    if kind is not TAR_FOLDER and not (root / META_DIR / "split.yaml").is_file():
        # a kind without splits (a line file): every split name sees the whole source
        try:
            dataset = _open(root, "train")
        except EnergonLiteError as exc:
            return [*problems, f"{root}: {exc}"]
        return problems + lint_source(dataset, root.name, progress)
    split = load_split(root)
    known = split.split_parts
    owner: dict[str, str] = {}
    for split_part, shards in known.items():
        for shard in dict.fromkeys(shards):
            if shard in owner:
                problems.append(
                    f"{split.source}: shard {shard} is in split {owner[shard]!r} and in "
                    f"split {split_part!r}"
                )
            owner.setdefault(shard, split_part)
    for split_part in split_parts or known:
        if split_part not in known:
            problems.append(f"{split_part}: no such split; the dataset has {sorted(known)}")
            continue
        try:
            dataset = _open(root, split_part)
        except EnergonLiteError as exc:
            problems.append(f"{split_part}: {exc}")
            continue
        problems.extend(lint_source(dataset, split_part, progress))
        if isinstance(dataset, PreparedDataset):  # every byte against prepare's CRC-32s
            problems.extend(_lint_whole_shards(dataset, split_part, progress))
    return problems


def _lint_whole_shards(dataset: PreparedDataset, label: str, progress: bool) -> list[str]:
    problems = []
    shard_ids = sorted({int(s) for s in dataset.run_shard})
    for shard_id in tqdm(shard_ids, desc=f"checksums {label}", unit="shard", disable=not progress):
        try:
            dataset.check_whole_shard(shard_id)
        except EnergonLiteError as exc:
            problems.append(f"{label}: {exc}")
    return problems


def lint_source(dataset: Source, label: str, progress: bool = True) -> list[str]:
    """Decode every sample of an opened split; one line per failure, starting with ``label``."""
    factory, decoder = _decoding(dataset)
    problems = []
    with tqdm(total=len(dataset), desc=f"lint {label}", unit="sample", disable=not progress) as bar:
        for shard_id, index in _positions(dataset):
            where = f"{dataset.shard_names[shard_id]} #{index}"
            try:
                key, parts = dataset.read(shard_id, index)
                where += f" {key}"
                raw = {"__key__": key, "__restore_key__": SampleKey(0, shard_id, index, 0), **parts}
                factory.build(raw, decoder, None)
            except (EnergonLiteError, Exception) as exc:
                problems.append(f"{label}: {where}: {type(exc).__name__}: {exc}")
            bar.update()
    return problems


def describe_state(state: Any) -> str:
    """A readable summary of a loader state (one rank's, or a list of ranks')."""
    from energon_lite.state.compact import unpacked
    from energon_lite.state.upgrade import upgrade_state

    def read_back(saved: Any) -> Any:  # today's form; a version not read: as it is
        return upgrade_state(unpacked(saved), strict=False)

    try:
        read = [read_back(s) for s in state] if isinstance(state, list) else read_back(state)
    except StateError as exc:
        return f"a loader state that does not read back: {exc}"
    if isinstance(read, list):  # one level only: a crafted file may nest lists deeply
        from energon_lite.cli.checkpoint_info import describe_layout

        return describe_layout(read) + "\n\n".join(
            f"rank {i}:\n{_describe_rank(s, o)}" if not isinstance(s, list) else f"rank {i}: a list"
            for i, (s, o) in enumerate(zip(read, state))
        )
    return _describe_rank(read, state)


_SOURCES_SHOWN = 8  # parents listed per stage (a blend's leaves, a worker's pipelines)


def _describe_rank(state: Any, saved: Any = None) -> str:
    """``state`` as read (version 2); ``saved`` as stored, when it was a compact version 3."""
    if not isinstance(state, dict) or state.get("type") != "SavableLoader":
        return f"not an energon_lite loader state: {type(state).__name__}"
    config = state.get("config")
    workers = state.get("workers", [])
    if not isinstance(config, dict) or not isinstance(workers, list):
        return "not an energon_lite loader state: 'config' must be a dict, 'workers' a list"
    version = f"v{state.get('version')}"
    if isinstance(saved, dict) and saved is not state and "pipelines" in saved:
        version = f"v{saved.get('version')} (pipelines packed)"
    lines = [
        f"energon_lite loader state {version}, epoch pass {state.get('epoch')}, next worker {state.get('next_worker')}"
    ]
    from energon_lite.cli.checkpoint_info import describe_config, describe_work

    lines.extend(describe_config(state, config))

    for worker, worker_state in enumerate(workers):
        lines.append(f"  worker {worker}: " + describe_work(worker_state))
        node, depth = worker_state, 2
        while isinstance(node, dict):
            fields = {k: v for k, v in node.items() if k not in ("type", "source", "sources")}
            shown = ", ".join(
                f"{k}={len(v)} items"
                if isinstance(v, list) and k == "keys"
                else f"{k}={short_repr(v)}"
                for k, v in fields.items()
            )
            lines.append("  " * depth + f"{node.get('type')}: {shown}")
            children = node.get("sources", [])
            children = children if isinstance(children, list) else []
            for child in children[:_SOURCES_SHOWN]:
                if not isinstance(child, dict):
                    continue
                lines.append(
                    "  " * (depth + 1)
                    + f"{child.get('type')}: epoch={child.get('epoch')}, open={child.get('open')}"
                )
            if len(children) > _SOURCES_SHOWN:  # a canonical layout's pipelines: 1024 or more
                lines.append("  " * (depth + 1) + f"... and {len(children) - _SOURCES_SHOWN} more")
            node, depth = node.get("source"), depth + 1
    return "\n".join(lines)
