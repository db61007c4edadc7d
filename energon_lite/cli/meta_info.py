"""``info``, ``preview`` and ``lint`` of a metadataset YAML: its splits, each blend's weights
or per-epoch quotas, then the commands' output for each dataset it names.

A metadataset is read exactly as ``get_train_dataset`` reads it (``load_metadataset``): the
same leaves, subsets, split parts and subflavors, and the same errors for a bad file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from energon_lite.cli.info import dataset_info, lint_source, preview_source
from energon_lite.errors import EnergonLiteError
from energon_lite.metadataset.parse import epoch_quota, load_metadataset, split_names
from energon_lite.sources.kinds import open_source
from energon_lite.sources.leaf import Leaf
from energon_lite.storage import RemotePath, as_path

_MODES = {
    "single": "one dataset",
    "weights": "blend: samples drawn by weight",
    "epochized": "blend_epochized: exact samples of each dataset per epoch",
}


def is_metadataset(path: str | os.PathLike[str] | RemotePath) -> bool:
    """A metadataset YAML file, as ``get_train_dataset`` tells one from a dataset folder."""
    given = as_path(path)
    return given.suffix in (".yaml", ".yml") and given.is_file()


def _leaf_line(leaf: Leaf, mode: str, count: int) -> str:
    line = f"{leaf.path} (split {leaf.split_part}): {count} samples"
    if mode == "weights" and callable(leaf.weight):
        start = leaf.weight(0)
        line += f", scheduled weight, {start:.4g} at step 0 ({100 * start:.1f}% of samples)"
    elif mode == "weights" and isinstance(leaf.weight, (int, float)):
        given = leaf.given_weight if leaf.given_weight is not None else leaf.weight
        unit = leaf.weight_unit or "samples"
        line += f", weight {given:.4g} ({100 * leaf.weight:.1f}% of {unit})"
    if mode == "epochized":
        line += f", repetitions {leaf.repetitions or 1:g} = {epoch_quota(leaf, count)} per epoch"
    if leaf.subset is not None:
        line += f", subset {list(leaf.subset)}"
    if leaf.subflavors:
        line += f", subflavors {leaf.subflavors}"
    return line


def metadataset_info(root: str | os.PathLike[str] | RemotePath) -> str:
    """Each split's datasets with their weights or quotas, then ``info`` of each dataset."""
    given = as_path(root)
    lines = [f"metadataset {given}"]
    datasets: dict[str, Leaf] = {}
    for split in split_names(given):
        leaves, mode = load_metadataset(given, split)
        if split != "train" and len(leaves) > 1:
            mode_text = "its datasets one after another, each once (weights apply to train)"
        else:
            mode_text = _MODES.get(mode, mode)
        options = {"batch_composition": leaves[0].composition, "weight_unit": leaves[0].weight_unit}
        if split == "train" and mode == "weights":
            mode_text += "".join(f", {k}: {v}" for k, v in options.items() if v is not None)
        lines.append(f"  split {split}: {mode_text}")
        for leaf in leaves:
            count = len(open_source(leaf))
            lines.append(f"    {_leaf_line(leaf, mode if split == 'train' else 'single', count)}")
            datasets.setdefault(str(leaf.path), leaf)
    for leaf in datasets.values():
        lines.extend(["", dataset_info(leaf.path)])
    return "\n".join(lines)


def metadataset_preview(
    root: str | os.PathLike[str] | RemotePath, split_part: str = "train", num: int = 5
) -> list[str]:
    """The first ``num`` samples of each dataset of one split of a metadataset."""
    given = as_path(root)
    leaves, mode = load_metadataset(given, split_part)
    lines = []
    for leaf in leaves:
        source = open_source(leaf)
        lines.append(f"== {_leaf_line(leaf, mode, len(source))}")
        lines.extend(preview_source(source, num, leaf.subflavors))
    return lines


def metadataset_lint(
    root: str | os.PathLike[str] | RemotePath,
    progress: bool = True,
    split_parts: Sequence[str] | None = None,
) -> list[str]:
    """Decode every sample each split (or each of ``split_parts``) of a metadataset reads;
    one line per failure, naming the split, the dataset and the sample. A dataset split read
    by several entries is checked once."""
    given = as_path(root)
    known = split_names(given)
    problems: list[str] = []
    checked: set[tuple[str, ...]] = set()
    for split in split_parts or known:
        if split not in known:
            problems.append(f"{split}: no such split; {given} has {known}")
            continue
        try:
            leaves, _ = load_metadataset(given, split)
        except EnergonLiteError as exc:
            problems.append(f"{split}: {exc}")
            continue
        for leaf in leaves:
            what = (str(leaf.path), leaf.split_part, leaf.split_config, str(leaf.subset))
            if what in checked:
                continue
            checked.add(what)
            label = f"{split}: {leaf.path} (split {leaf.split_part})"
            try:
                source = open_source(leaf)
            except EnergonLiteError as exc:
                problems.append(f"{label}: {exc}")
                continue
            problems.extend(lint_source(source, label, progress))
    return problems
