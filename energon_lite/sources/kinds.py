"""The registry of dataset kinds: which code opens (and prepares) a path a user gives.

A *kind* is a way of storing a dataset: a prepared tar folder (built in), a video-text
table, robot episodes, JSONL, remote stores ... Each flavor registers its kind with
:func:`register_kind` in its ``kind`` module; the core never imports a flavor. The
registry finds kinds in two places, on first use:

* every package ``energon_lite.flavors.<name>`` that has a ``kind`` module (the flavors
  shipped with energon_lite), and
* the ``energon_lite.dataset_kinds`` entry-point group (kinds from other packages).

``kind_of(path)`` asks each registered kind's ``detect`` in registration order (flavors in
name order, then entry points) and falls back to the tar folder. Adding a kind is one
module with one ``register_kind(DatasetKind(...))`` line; see ``docs/architecture.md``.

A local folder that ``prepare`` made a tar dataset of is known by the names in its
``.nv-meta`` alone: the tar format's own files (``.info.json`` among them) and nothing else.
No shipped flavor claims such a folder (``tests/test_kinds.py`` asks each of them), so for it
the flavors' modules are not imported: only kinds already registered in the process and,
where the environment has any, the entry-point plugins are asked. A plain tar loop then
loads none of the flavors' 18 modules (issue 42: time to the first batch).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import Distribution, EntryPoint, distributions
from pathlib import Path
from typing import Any

from energon_lite.errors import ConfigError, DatasetFormatError, logger
from energon_lite.sources.base import Source
from energon_lite.sources.leaf import Leaf
from energon_lite.storage import RemotePath, StoragePath, as_path, is_remote

ENTRY_POINT_GROUP = "energon_lite.dataset_kinds"
FLAVORS_PACKAGE = "energon_lite.flavors"

# open(path, split_part, *, split_config, dataset_config, subset) -> Source
Opener = Callable[..., Source]
# prepare(path, options) -> a one-line report; options are the CLI's (``--split-ratio`` parsed)
Preparer = Callable[[Path, Mapping[str, Any]], str]


@dataclass(frozen=True)
class DatasetKind:
    """How one kind of dataset is recognised, opened and prepared."""

    name: str
    detect: Callable[[Path], bool]  # cheap: a suffix or a marker file, no scanning
    open: Opener | None = None  # None: not loaded by get_train_dataset (see loads_with)
    resolve: Callable[[Path], Path] | None = None  # a user's path -> the prepared location
    prepare: Preparer | None = None  # `energon-lite prepare` of this kind
    loads_with: str = ""  # where to load it instead, when ``open`` is None
    # `energon-lite info/preview/lint`: for a kind that opens as a Source these add to what
    # the commands print for every source; for one that does not (open is None) they are it.
    describe: Callable[[Path], list[str]] | None = None  # info lines
    preview: Callable[[Path, str, int], list[str]] | None = None  # (path, split, num) -> lines
    lint: Callable[[Path, bool], list[str]] | None = None  # (path, progress) -> problems
    # the split names of a kind that keeps them in its own layout, not in .nv-meta/split.yaml
    # (`info` and `lint` open each of them)
    splits: Callable[[StoragePath], list[str]] | None = None
    # file-name suffixes of this kind: such a path on remote storage is refused by name
    # unless ``remote`` (its opener reads s3://, msc://, http(s):// paths too); the tar
    # folder is read from remote storage
    suffixes: tuple[str, ...] = ()
    remote: bool = False
    # a file below a folder of this kind that marks it (".nv-meta/<name>"): how a remote
    # folder is recognised (``remote`` kinds only; one listing of the folder's .nv-meta)
    marker: str = ""


def _open_tar_folder(path: Path, split_part: str, **options: Any) -> Source:
    from energon_lite.shards.dataset import PreparedDataset

    return PreparedDataset(path, split_part, **options)


TAR_FOLDER = DatasetKind("webdataset", detect=lambda path: True, open=_open_tar_folder)

_registered: list[DatasetKind] = []
_discovered = False
_plugins: list[EntryPoint] | None = None  # the entry points, read once


def register_kind(kind: DatasetKind) -> DatasetKind:
    """Add ``kind`` to the registry (a kind of the same name is replaced); returns it."""
    for i, known in enumerate(_registered):
        if known.name == kind.name:
            _registered[i] = kind
            return kind
    _registered.append(kind)
    return kind


def registered_kinds() -> list[DatasetKind]:
    """The registered kinds in detection order, the tar folder (the fallback) last."""
    _discover()
    return [*_registered, TAR_FOLDER]


def kind_of(path: str | os.PathLike[str] | RemotePath) -> DatasetKind:
    """The kind of the dataset at ``path`` (the tar folder when no other kind claims it)."""
    path = as_path(path)
    if is_remote(path):  # by name: a remote store is a tar folder or a kind's file
        for kind in registered_kinds():
            if kind.suffixes and path.name.endswith(kind.suffixes):
                if kind.remote:
                    return kind
                raise DatasetFormatError(
                    f"{path}: a {kind.name} dataset on remote storage is not read (only prepared "
                    "tar folders are); copy the file and its .idx to a local folder and give "
                    "that path"
                )
        for kind in registered_kinds():
            if kind.remote and kind.marker and (path / kind.marker).is_file():
                return kind
        return TAR_FOLDER
    # a prepared tar folder: no shipped flavor claims it, so only kinds registered so far and
    # plugins are asked (all kinds when the environment has plugins)
    asked = list(_registered) if _prepared_tar_folder(path) and not _plugin_entries() else None
    for kind in registered_kinds() if asked is None else asked:
        if kind.detect(path):
            return kind
    return TAR_FOLDER


def _prepared_tar_folder(path: Path) -> bool:
    """Whether ``path``'s ``.nv-meta`` holds a tar prepare's files and nothing else: one
    listing, the cheap marker that lets ``kind_of`` leave the flavors unimported."""
    from energon_lite.shards.meta import INFO_JSON, INFO_YAML, META_DIR
    from energon_lite.shards.record_table import TABLE
    from energon_lite.shards.shard_record import RECORD

    try:
        names = set(os.listdir(path / META_DIR))
    except OSError:  # no such folder, or a file
        return False
    own = {INFO_JSON, INFO_YAML, "split.yaml", "dataset.yaml", RECORD, TABLE}
    own |= {"index.sqlite", "index.uuid"}  # Energon's, beside a folder it prepared
    return bool(names & {INFO_JSON, INFO_YAML}) and names <= own


def resolve_path(path: str | os.PathLike[str] | RemotePath) -> StoragePath:
    """Where the prepared dataset of a user's ``path`` lives (e.g. a CSV's index folder)."""
    kind, where = kind_of(path), as_path(path)
    if kind.resolve is not None and (isinstance(where, Path) or kind.remote):
        return kind.resolve(where)  # type: ignore[arg-type]  # a remote kind takes URLs
    return where


def open_source(leaf: Leaf) -> Source:
    """Open one leaf of a (meta)dataset through its kind."""
    kind = kind_of(leaf.path)
    if kind.open is None:
        raise ConfigError(
            f"{leaf.path} is a {kind.name} dataset, which get_train_dataset cannot load; "
            f"load it with {kind.loads_with or 'its flavor module'}"
        )
    return kind.open(
        leaf.path,
        leaf.split_part,
        split_config=leaf.split_config,
        dataset_config=leaf.dataset_config,
        subset=leaf.subset,
    )


def _plugin_entries() -> list[EntryPoint]:
    """The plugins' entry points, read on first use and kept."""
    global _plugins
    if _plugins is None:
        _plugins = _plugin_entry_points()
    return _plugins


def _plugin_entry_points() -> list[EntryPoint]:
    """The ``ENTRY_POINT_GROUP`` entry points of the installed distributions, as
    ``importlib.metadata.entry_points(group=...)`` gives them (a distribution shadowed by an
    earlier one of the same name on ``sys.path`` is left out), parsing only the distributions
    whose ``entry_points.txt`` names the group: ``entry_points`` parses every distribution's
    file (about 50 ms in an environment of 200 packages, on the first dataset a process
    opens), while a plain tar loop has no plugin at all (issue 42)."""
    dists = list(distributions())
    found: list[EntryPoint] = []
    for i, dist in enumerate(dists):
        text = dist.read_text("entry_points.txt")
        if not text or ENTRY_POINT_GROUP not in text:
            continue
        name = _dist_name(dist)
        if any(_dist_name(earlier) == name for earlier in dists[:i]):
            continue  # shadowed, as importlib.metadata leaves it out
        found.extend(dist.entry_points.select(group=ENTRY_POINT_GROUP))
    return found


def _dist_name(dist: Distribution) -> str:
    """The name ``importlib.metadata`` tells distributions apart by (from the folder's name
    where it can)."""
    name = getattr(dist, "_normalized_name", None) or dist.metadata["Name"] or ""
    return str(name)


def _discover() -> None:
    """Import the shipped flavors' ``kind`` modules and the entry points, once."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    flavors = importlib.import_module(FLAVORS_PACKAGE)
    for module in sorted(pkgutil.iter_modules(flavors.__path__), key=lambda m: m.name):
        # Look for the file instead of asking find_spec, which imports the package first: a
        # package that is no kind (flavors/webdataset) must not be loaded, nor its extras.
        folder = getattr(module.module_finder, "path", None)
        if module.ispkg and folder and (Path(folder) / module.name / "kind.py").is_file():
            importlib.import_module(f"{FLAVORS_PACKAGE}.{module.name}.kind")
    for entry in _plugin_entries():
        try:
            loaded = entry.load()
        except Exception as exc:  # a broken third-party plugin must not stop the others
            logger.warning("dataset kind plugin %s failed to load: %s", entry.name, exc)
            continue
        if isinstance(loaded, DatasetKind):
            register_kind(loaded)
