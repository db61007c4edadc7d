"""``join:`` in a metadataset -> one leaf: a join spec file the join dataset kind opens.

A join names two or more prepared datasets (a list: the joiner gets the samples as
positional arguments; a mapping: as keyword arguments by those names) and a ``joiner``
(``{__module__, __function__}`` or a Sample class ``{__module__, __class__}`` with
``from_joined``). The first dataset is the primary: the joined dataset has its samples (and
order, shards, subsets); every other one is matched by sample key, and ``nonmatch`` says
what a primary sample without a partner does: ``error`` (the default), ``skip`` (left
out) or ``none`` (the joiner gets None).

The spec is plain data written atomically to ``<metadataset>.cache/join-<digest>.join.json``
(the digest covers the spec, so an edit makes a new file); the leaf's path is that file, and
``energon_lite.flavors.join`` opens it. The key-match index is made while the metadataset is
prepared (``prepare_metadataset`` opens its joins inside :func:`preparing_joins`), into
``index/`` beside the spec; loading a join whose index is missing is an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from energon_lite.samples.resolver import trust_joiner
from energon_lite.sources.leaf import Leaf

SUFFIX = ".join.json"
NONMATCH = ("error", "skip", "none")
_PARTNER_KEYS = ("path", "split_part", "subflavors", "nonmatch", "split_config", "dataset_config")
INDEX_FOLDER = "index"

# (spec, index) of every join opened while a metadataset is prepared; None otherwise
_PREPARING: ContextVar[list[tuple[Path, Path]] | None] = ContextVar(
    "energon_lite_preparing_joins", default=None
)


def joins_being_prepared() -> list[tuple[Path, Path]] | None:
    """Inside :func:`preparing_joins`, the list a join opened records itself in; else None
    (a join whose index is missing is then an error)."""
    return _PREPARING.get()


@contextlib.contextmanager
def preparing_joins() -> Iterator[list[tuple[Path, Path]]]:
    """Joins opened inside make their missing match indexes; yields the ``(spec, index)``
    paths of the joins opened (for :func:`remove_stale_join_files`)."""
    used: list[tuple[Path, Path]] = []
    token = _PREPARING.set(used)
    try:
        yield used
    finally:
        _PREPARING.reset(token)


def remove_stale_join_files(used: list[tuple[Path, Path]], folders: list[Path]) -> list[Path]:
    """After a metadataset's joins were all prepared: delete the spec and index files in
    their cache folders (and ``folders``) that no join of it uses any more (as Energon's
    prepare does); returns the deleted paths."""
    keep = {path for pair in used for path in pair}
    removed = []
    for folder in {spec.parent for spec, _ in used} | set(folders):
        candidates = [*folder.glob("*.join.json"), *folder.glob("*.join.json.*.npy")]
        candidates += (folder / INDEX_FOLDER).glob("*.npy")
        for path in candidates:
            if path not in keep and path.is_file():
                path.unlink()
                removed.append(path)
    return removed


def join_leaf(
    node: dict[str, Any],
    base: Path,
    split_part: str,
    yaml_path: Path,
    outer_subflavors: dict[str, Any] | None,
    where: Any,
) -> Leaf:
    """The leaf of a ``{join: ..., joiner: ...}`` node (``where`` names it in errors)."""
    entries = node["join"]
    named: list[tuple[str | None, Any]]
    if isinstance(entries, dict):
        named = [(str(name), ref) for name, ref in entries.items()]
        by_name = True
    elif isinstance(entries, list):
        named = [(None, ref) for ref in entries]
        by_name = False
    else:
        raise (where / "join").error("must be a list or a mapping of datasets")
    if len(named) < 2:
        raise (where / "join").error("needs at least two datasets to join")
    joiner = node.get("joiner")
    if (
        not isinstance(joiner, dict)
        or "__module__" not in joiner
        or not ("__function__" in joiner or "__class__" in joiner)
    ):
        raise (where / "joiner").error(
            f"{joiner!r}; needs __module__ and __function__ (or a Sample __class__)"
        )
    partners = []
    for index, (name, ref) in enumerate(named):
        at = where / "join" / (name if name is not None else index)
        if not isinstance(ref, dict) or "path" not in ref:
            raise at.error(f"needs path:; allowed keys: {list(_PARTNER_KEYS)}")
        unknown = [k for k in ref if k not in _PARTNER_KEYS]
        if unknown:
            raise (at / unknown[0]).error(f"unknown key; allowed: {', '.join(_PARTNER_KEYS)}")
        target = (base / str(ref["path"])).resolve()
        if not (target / ".nv-meta").is_dir():
            raise (at / "path").error(f"{target} is not a prepared dataset folder")
        nonmatch = ref.get("nonmatch", "error")
        if nonmatch not in NONMATCH or (index == 0 and "nonmatch" in ref):
            raise (at / "nonmatch").error(
                f"{nonmatch!r}; allowed on the datasets after the first: {list(NONMATCH)}"
            )
        partners.append(
            {
                "name": name,
                "path": str(target),
                "split_part": ref.get("split_part", split_part),
                "nonmatch": nonmatch,
                "subflavors": ref.get("subflavors"),
                "split_config": ref.get("split_config", "split.yaml"),
                "dataset_config": ref.get("dataset_config", "dataset.yaml"),
            }
        )
    spec = {"version": 1, "partners": partners, "joiner": joiner, "by_name": by_name}
    path = write_spec(spec, yaml_path.with_name(yaml_path.name + ".cache"))
    trust_joiner(path, joiner)  # the metadataset names it: imported as in Energon
    subflavors = {**(partners[0]["subflavors"] or {}), **(outer_subflavors or {})}
    return Leaf(path, split_part, subflavors=subflavors or None)


def write_spec(spec: dict[str, Any], folder: Path) -> Path:
    text = json.dumps(spec, indent=1, sort_keys=True)
    digest = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
    target = folder / f"join-{digest}{SUFFIX}"
    if not target.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{target.name}.{os.getpid()}.tmp"
        tmp.write_text(text + "\n", encoding="utf-8")
        os.replace(tmp, target)
    return target
