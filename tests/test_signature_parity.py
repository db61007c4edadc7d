"""Every name of energon_lite's Energon surface (``energon_lite.__all__`` names that
megatron-energon exports too, and the deep module paths of ``test_deep_import_names``)
compared with megatron-energon's object of the same name: type parameters (``Generic``),
and for functions, classes' ``__init__`` and their public methods, whether a call written
for Energon works the same here: positional names and order, every Energon parameter
present, literal defaults equal, nothing keyword-only here that Energon takes by position,
nothing required here that Energon defaults (a default or a positional use only here is
allowed: it accepts more), and Energon's public methods present. What differs on purpose is
listed in ``INTENDED`` with a one-line reason; anything else fails, and so does an entry that
no longer differs."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from conftest import oracle
from test_deep_import_names import DEEP_NAMES

import energon_lite as el

energon = oracle()

_P = inspect.Parameter
_LITERALS = (type(None), bool, int, float, str)


def _surface() -> dict[str, tuple[Any, Any]]:
    pairs = {n: (getattr(el, n), getattr(energon, n)) for n in el.__all__ if hasattr(energon, n)}
    for path, names in DEEP_NAMES.items():
        if path.startswith("transforms"):
            continue  # Energon's transforms import torchvision (test_deep_import_names)
        ours = importlib.import_module(f"energon_lite.{path}")
        theirs = importlib.import_module(f"megatron.energon.{path}")
        for name in names:
            ours_obj, theirs_obj = getattr(ours, name), getattr(theirs, name)
            if all(ours_obj is not o or theirs_obj is not t for o, t in pairs.values()):
                pairs[f"{path}.{name}"] = (ours_obj, theirs_obj)
    return pairs


def _params(fn: Any) -> list[_P] | None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    return [p for p in signature.parameters.values() if p.name not in ("self", "cls")]


def _signature_differences(ours: Any, theirs: Any) -> list[str]:
    """How a call written for Energon's ``theirs`` may fail or mean another thing on ours."""
    mine, their = _params(ours), _params(theirs)
    if mine is None or their is None:
        return []
    out = []
    positional = (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)
    their_pos = [p.name for p in their if p.kind in positional]
    my_pos = [p.name for p in mine if p.kind in positional]
    if my_pos[: len(their_pos)] != their_pos:
        out.append(f"positional {my_pos} vs {their_pos}")
    by_name = {p.name: p for p in mine}
    for p in their:
        if p.kind in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD) or p.name.startswith("_"):
            continue
        mine_p = by_name.get(p.name)
        if mine_p is None:
            out.append(f"no parameter {p.name}")
            continue
        if mine_p.kind == _P.KEYWORD_ONLY and p.kind != _P.KEYWORD_ONLY:
            out.append(f"{p.name}: keyword-only here, not in Energon")
        if p.default is not _P.empty and mine_p.default is _P.empty:
            out.append(f"{p.name}: required here, default {p.default!r} in Energon")
        elif (
            isinstance(p.default, _LITERALS)
            and mine_p.default is not _P.empty
            and (p.default != mine_p.default or type(p.default) is not type(mine_p.default))
        ):
            out.append(f"{p.name}: default {mine_p.default!r} vs {p.default!r}")
    their_names = {p.name for p in their}
    takes_kwargs = any(p.kind == _P.VAR_KEYWORD for p in their)
    for p in mine:
        required = p.default is _P.empty and p.kind not in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD)
        if required and p.name not in their_names and not takes_kwargs:
            out.append(f"requires {p.name}")
    return out


def _differences() -> dict[str, list[str]]:
    """``name`` or ``name.member`` -> what differs."""
    found: dict[str, list[str]] = {}
    for name, (ours, theirs) in sorted(_surface().items()):
        if isinstance(theirs, type):
            if not isinstance(ours, type):
                found[name] = ["not a class here"]
                continue
            their_params = len(getattr(theirs, "__parameters__", ()) or ())
            my_params = len(getattr(ours, "__parameters__", ()) or ())
            if their_params != my_params:
                found[f"{name}[]"] = [f"{my_params} type parameters vs {their_params}"]
            members = ["__init__"] + [
                m
                for m, v in vars(theirs).items()
                if not m.startswith("_")
                and (callable(v) or isinstance(v, classmethod | staticmethod))
            ]
            for member in members:
                if inspect.getattr_static(ours, member, None) is None:
                    found[f"{name}.{member}"] = ["missing here"]
                    continue
                diff = _signature_differences(getattr(ours, member), getattr(theirs, member))
                if diff:
                    found[f"{name}.{member}"] = diff
        elif callable(theirs):
            diff = _signature_differences(ours, theirs)
            if diff:
                found[name] = diff
    return found


def _each(names: str, members: str, reason: str) -> dict[str, str]:
    return {f"{n}.{m}" if m else n: reason for n in names.split() for m in members.split() or [""]}


# Energon's state protocol methods each wrapper lacks here
_STATE_MISSING = {
    "BatchDataset": "reset_state_own len_worker can_restore_sample assert_can_restore restore_sample",
    "BlendDataset": "reset_state_own len_worker",
    "ConcatDataset": "reset_state_own len_worker",
    "EpochizeDataset": "reset_state_own len_worker",
    "FilterDataset": "reset_state_own len_worker",
    "GcDataset": "reset_state_own len_worker",
    "GroupBatchDataset": "reset_state_own len_worker save_state restore_state can_restore_sample assert_can_restore restore_sample",
    "IterMapDataset": "reset_state_own len_worker can_restore_sample assert_can_restore restore_sample",
    "LimitDataset": "reset_state_own len_worker len_rank worker_has_samples",
    "LogSampleDataset": "reset_state_own len_worker",
    "MapDataset": "reset_state_own len_worker can_restore_sample assert_can_restore restore_sample",
    "MixBatchDataset": "reset_state_own len_worker",
    "PackingDataset": "reset_state_own len_worker can_restore_sample assert_can_restore restore_sample",
    "RepeatDataset": "reset_state_own len_worker",
    "SavableDataset": "len_worker len_rank save_state restore_state reset_state_own reset_state_deep worker_has_samples can_restore_sample assert_can_restore restore_sample",
    "ShuffleBufferDataset": "reset_state_own len_worker restore_sample",
    "wrappers.watchdog_dataset.WatchdogDataset": "reset_state_own len_worker",
}
_STATE_REASON = (
    "Energon's per-wrapper state protocol: here stages hold state and the loader saves and "
    "restores it (save_state_rank / restore_state_rank / restore_sample)"
)
_NAME_REASON = "the file name parameter is called name (positional calls are the same)"
_LOADER_OPTIONS = "taken through **kwargs and checked there (compat/arguments.py), not named"

# differences kept on purpose: a call written for Energon still works, or the feature lives
# elsewhere here (docs/migration.md)
INTENDED: dict[str, str] = {
    **{k: _STATE_REASON for n, ms in _STATE_MISSING.items() for k in _each(n, ms, "")},
    **_each(
        "BaseCoreDatasetFactory BaseWebdatasetFactory JoinedWebdatasetFactory",
        "as_file_store",
        "auxiliary file stores come from a metadataset's aux: entries, not from a factory",
    ),
    **_each(
        "BaseWebdatasetFactory DefaultGenericWebdatasetFactory DefaultDecoderWebdatasetFactory "
        "JoinedWebdatasetFactory",
        "load_sample config",
        "factories are adapters over the loader: samples are built by samples/factory.py, "
        "a pipeline describes itself with loader.config()",
    ),
    "BaseWebdatasetFactory.sample_filter": "part filtering is dataset.yaml's part_filter",
    "CrudeJsonlDatasetFactory.build": "JSONL datasets are built by the loaders",
    **_each(
        "CrudeJsonlDatasetFactory DefaultCrudeJsonlDatasetFactory",
        "__init__ config",
        "JSONL datasets are a dataset kind opened by path (get_dataset_from_config / loaders)",
    ),
    "CrudeWebdataset.__init__": "the crude kind is opened by the loader from dataset.yaml",
    "DatasetLoader.get_dataset": "get_datasets covers it (a one-leaf result)",
    **_each(
        "DatasetLoader DatasetLoaderInterface Metadataset MetadatasetV2",
        "get_datasets",
        "shuffle_over_epochs_multiplier / subset are set per entry in the metadataset YAML",
    ),
    **_each(
        "DatasetLoaderInterface Metadataset MetadatasetV2",
        "traverse",
        "the file's own path is known to the object; Energon passes it in again",
    ),
    **_each("Metadataset MetadatasetV2", "__init__", "splits are read from the file"),
    **_each(
        "FileStore PrimaryFileStore DecodeFileStore SystemFileStore",
        "get_media_metadata",
        _NAME_REASON,
    ),
    **_each("FileStore PrimaryFileStore", "get", _NAME_REASON),
    "SampleDecoder.decode": "decodes a whole raw sample (parts by extension), not one file",
    **_each(
        "SavableDataLoader",
        "next_id save_state restore_state",
        "Energon's internal per-step state; save_state_rank / restore_state_rank are the API",
    ),
    "SavableDataLoader.restore_state_global": "the first parameter is called states "
    "(positional calls are the same)",
    "SavableDataset.__init__": "a SavableDataset is made by get_train_dataset & friends",
    **_each(
        "TaskEncoder",
        "build_batch build_cook_crude_sample build_encode_sample build_train_datasets "
        "build_val_datasets",
        "the chain is wired by pipeline/dataset_pipeline.py from the hooks, not by "
        "TaskEncoder.build_* methods",
    ),
    "TaskEncoder.cook_crude_sample": "cookers are found from the crude sample itself",
    **_each(
        "WorkerConfig",
        "worker_activate worker_push_sample_index worker_pop_sample_index worker_deactivate "
        "global_rank rank_worker_id assert_worker global_worker_id worker_seed",
        "Energon's process-global active worker; here the loader tracks workers and hooks "
        "read current_sample_index (no hidden global state)",
    ),
    "get_val_datasets": _LOADER_OPTIONS,
    "Cooker.is_match": "matching takes the crude sample (its subflavors and more)",
    "AugmentTaskEncoder.encode_batch": "the batch parameter is called batch "
    "(positional calls are the same)",
}


def test_every_difference_is_listed_with_its_reason() -> None:
    found = _differences()
    unlisted = {k: v for k, v in found.items() if k not in INTENDED}
    stale = sorted(k for k in INTENDED if k not in found)
    assert (unlisted, stale) == ({}, [])


def test_the_table_covers_every_name_energon_exports() -> None:
    """Every public name of megatron-energon is one of ours, so ``_surface`` compares it."""
    compared = {name.split(".")[0] for name in _surface()}
    assert sorted(set(energon.__all__) - {"__version__"} - compared) == []
