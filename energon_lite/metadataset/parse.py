"""MetadatasetV2 YAML -> a flat list of ``Leaf``s and a blend mode (docs/metadataset.md, docs/formats.md).

Over 300 lines on purpose: one YAML schema with its key-path errors and the subset
arithmetic that composes outer and inner ranges; splitting them would scatter one format.

Algorithm: a depth-first walk of the requested split. A split (or a blend entry) is a
*reference* (``path:`` a prepared dataset folder or a nested metadataset ``.yaml``, relative
to the file it is written in) or a ``blend:`` / ``blend_epochized:`` list of references.
Walking down carries what outer levels impose, combined the way Energon combines it:

* weights are normalised per ``blend`` list and multiplied down the tree (leaf weight =
  product of ``weight / sum(weights)``); ``repetitions`` multiply; a tree holds one kind;
* ``subflavors``: outer keys override inner ones;
* ``split_part``: a reference's own value wins, else the enclosing split's name;
* ``subset``: an outer percentage range applies inside the inner one (``[0%, 50%]`` of
  ``[50%, 100%]`` is ``[50%, 75%]``); an absolute ``[100, end]`` only on a dataset folder,
  and applies first. Each leaf's range is resolved to sample indices here, with Energon's
  rounding (``int``), so both libraries pick the same samples;
* ``shuffle_over_epochs_multiplier``: ``null`` anywhere wins, then ``-1``, else multiply.

Every leaf's split is opened once to check that it exists and is not empty (cheap: the
``.nv-meta`` files, no tar index). A cycle of nested files is found from the stack of open
files. Every error names the file, the key path (``splits.train.blend[2].weight``) and what
is allowed (an unknown key with the closest known one). Bounds (docs/safety.md): weights and
repetitions finite, a leaf's repetitions at most ``MAX_REPETITIONS`` and at least one sample
per epoch, nested files at most ``MAX_NESTING`` deep. ``load_metadataset`` returns plain
data and holds no state.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from energon_lite.errors import ConfigError, DatasetFormatError, short_repr, unknown_keys
from energon_lite.metadataset.aux_sources import parse_aux
from energon_lite.metadataset.schedule import LeafShare, WeightSchedule, check_siblings
from energon_lite.metadataset.v1 import is_v1, v1_as_v2
from energon_lite.quotas import exact_repetitions
from energon_lite.shards.meta import META_DIR, load_yaml
from energon_lite.sources.kinds import open_source, resolve_path
from energon_lite.sources.leaf import Leaf
from energon_lite.storage import RemotePath, StoragePath, as_path
from energon_lite.storage.path import join

_MODULES = ("megatron.energon", "energon_lite")
_TOP_KEYS = ("__module__", "__class__", "splits")
_REF_KEYS = (
    "path",
    "split_part",
    "subflavors",
    "subset",
    "shuffle_over_epochs_multiplier",
    "dataset_config",
    "split_config",
    "aux",
)
_KIND = {"blend": "weight", "blend_epochized": "repetitions"}  # list key -> entry's number key
_MODE = {"blend": "weights", "blend_epochized": "epochized"}
COMPOSITIONS = ("random", "stratified", "per_source")  # batch_composition: beside blend:
WEIGHT_UNITS = ("samples", "tokens")  # weight_unit: beside blend:
_BLEND_KEYS = ("batch_composition", "weight_unit")
IN_CODE = "(metadataset given in code)"  # how errors name a mapping given in code
MAX_NESTING = 32  # nested metadataset files; deeper is a mistake (or a cycle by copies)
MAX_REPETITIONS = 1_000  # a leaf's repetitions, multiplied down the tree: one plan step each
# one metadataset file, read before it is parsed: a blend of thousands of entries takes about
# 100 KB, and PyYAML needs about 5 s for each MiB (a 13 MB file took minutes and 1.4 GB)
MAX_FILE_BYTES = 1 << 20


def load_metadataset(
    path: str | os.PathLike[str] | RemotePath | Mapping[str, Any],
    split_part: str,
    shuffle_over_epochs_multiplier: int | None = 1,
    *,
    open_leaves: bool = True,
) -> tuple[list[Leaf], str]:
    """The leaves of ``split_part`` of a metadataset YAML and the mode: "weights" (``blend``),
    "epochized" (``blend_epochized``) or "single" (one ``path:``).
    ``shuffle_over_epochs_multiplier`` (the loader argument) is the outermost multiplier:
    every entry's own value composes with it, as nested values compose.
    ``path`` may also be the YAML's content as a mapping (paths in it relative to the
    current directory; a weight may then be a ``weight_at(step)`` callable).
    ``open_leaves=False`` reads only the metadataset files (``traverse_metadataset``): a
    leaf folder need not exist or be prepared yet, and subsets stay unresolved."""
    data = None
    if isinstance(path, Mapping):  # the same content in code; paths relative to the cwd
        data, path = path, Path.cwd() / IN_CODE
    path = as_path(path).resolve()
    outer = _multiplier(
        {"shuffle_over_epochs_multiplier": shuffle_over_epochs_multiplier},
        1,
        _Where(path, "get_train_dataset(...)"),
    )
    inherited = _Inherited(multiplier=outer, open_leaves=open_leaves)
    leaves, mode = _load_file(path, split_part, inherited, (path,), data)
    if mode == "epochized" and open_leaves:
        _check_quotas(path, leaves)
    if mode == "epochized" and len(leaves) == 1 and leaves[0].repetitions == 1:
        # one dataset seen once per epoch is a plain dataset: no Blend stage needed
        leaves[0].repetitions, mode = None, "single"
    return leaves, mode


def split_names(path: str | os.PathLike[str] | RemotePath) -> list[str]:
    """The split names a metadataset YAML defines, in its order (v1 files read as v2)."""
    path = as_path(path)
    data = load_yaml(path, max_bytes=MAX_FILE_BYTES)
    if is_v1(data):
        data = v1_as_v2(data, path)
    splits = data.get("splits") if isinstance(data, dict) else None
    if not isinstance(splits, dict) or not splits:
        raise (_Where(path, "") / "splits").error(
            "needs a mapping of split names (train, val, ...) to datasets"
        )
    return [str(name) for name in splits]


def epoch_quota(leaf: Leaf, count: int) -> int:
    """Samples of a ``blend_epochized`` leaf of ``count`` samples in each blend epoch."""
    return math.floor(exact_repetitions(leaf.repetitions or 1) * count)


@dataclass(frozen=True)
class _Inherited:
    """What outer levels impose on everything below them."""

    subflavors: dict[str, Any] | None = None
    relative: tuple[float, float] | None = None  # Energon's DatasetSubset.range
    multiplier: int | None = 1
    open_leaves: bool = True  # False: read the files only (see load_metadataset)


class _Where:
    """A file and key path, for error messages."""

    def __init__(self, file: StoragePath, keys: str) -> None:
        self.file, self.keys = file, keys

    def __truediv__(self, key: Any) -> _Where:
        if isinstance(key, int):
            return _Where(self.file, f"{self.keys}[{key}]")
        if not isinstance(key, str) or len(key) > 60:  # a key from the file: bounded
            key = short_repr(key, 60)
        return _Where(self.file, f"{self.keys}.{key}" if self.keys else key)

    def error(self, problem: str) -> DatasetFormatError:
        return DatasetFormatError(f"{self.file}: {self.keys or '(top level)'}: {problem}")


def _load_file(
    path: StoragePath,
    split_part: str,
    inherited: _Inherited,
    stack: tuple[StoragePath, ...],
    data: Any = None,
) -> tuple[list[Leaf], str]:
    if data is None:
        data = load_yaml(path, max_bytes=MAX_FILE_BYTES)
    if is_v1(data):  # Energon's v1 ``datasets:`` lists: read as the v2 blend they mean
        data = v1_as_v2(data, path)
    top = _Where(path, "")
    if not isinstance(data, dict):
        raise top.error("a metadataset must be a mapping with __module__, __class__ and splits")
    _check_keys(data, _TOP_KEYS, top)
    module, cls = data.get("__module__"), data.get("__class__")
    if module not in _MODULES or cls != "MetadatasetV2":
        raise top.error(
            f"__module__: {short_repr(module)}, __class__: {short_repr(cls)}; allowed: __module__ one of "
            f"{list(_MODULES)} with __class__: MetadatasetV2"
        )
    splits = data.get("splits")
    if not isinstance(splits, dict) or not splits:
        raise (top / "splits").error("needs a mapping of split names (train, val, ...) to datasets")
    if split_part not in splits:
        raise (top / "splits").error(
            f"no split {short_repr(split_part)}; this file has {short_repr(list(splits))}"
        )
    where = _Where(path, f"splits.{split_part}")
    return _node(splits[split_part], path.parent, split_part, inherited, stack, where)


def _node(
    node: Any,
    base: StoragePath,
    split_part: str,
    inherited: _Inherited,
    stack: tuple[StoragePath, ...],
    where: _Where,
) -> tuple[list[Leaf], str]:
    """A split or a nested reference: a ``path:`` or one ``blend``/``blend_epochized`` list."""
    if not isinstance(node, dict):
        raise where.error("must be a mapping with one of path, blend, blend_epochized")
    kinds = [k for k in ("path", "blend", "blend_epochized", "join") if k in node]
    if not kinds:  # a misspelt kind is named as such, not only as a missing one
        _check_keys(node, (*_REF_KEYS, "blend", "blend_epochized"), where)
    if len(kinds) != 1:
        raise where.error(f"needs exactly one of path, blend, blend_epochized, join; found {kinds}")
    if kinds == ["join"]:
        return _join(node, base, split_part, inherited, where, ("join", "joiner", "subset"))
    if kinds == ["path"]:
        return _reference(node, base, split_part, inherited, stack, where, _REF_KEYS)
    kind = kinds[0]
    _check_keys(node, (kind, "subset", *(_BLEND_KEYS if kind == "blend" else ())), where)
    composition, unit = _blend_options(node, where)
    inherited = replace(inherited, relative=_merge_subset(node, inherited, where, folder=False))
    entries = node[kind]
    if not isinstance(entries, list) or not entries:
        raise (where / kind).error("is empty; list at least one dataset")
    number_key, other = _KIND[kind], _KIND["blend" if kind != "blend" else "blend_epochized"]
    numbers, results = [], []
    for index, entry in enumerate(entries):
        at = where / kind / index
        if isinstance(entry, dict) and other in entry:
            problem = (
                "both weight and repetitions" if number_key in entry else f"{other} in a {kind}"
            )
            raise (at / other).error(
                f"{problem}: a tree mixes either weights (blend) or repetitions "
                f"(blend_epochized), never both; use {number_key}"
            )
        allowed = (*_REF_KEYS, number_key)
        joined = ("join", "joiner", "subset", "subflavors", number_key)
        if isinstance(entry, dict):  # typos first: `wieght: 3` is unknown, not just weight missing
            _check_keys(entry, joined if "join" in entry else allowed, at)
        if not isinstance(entry, dict) or ("path" not in entry and "join" not in entry):
            raise at.error(f"needs path: and {number_key}:; allowed keys: {list(allowed)}")
        number = _weight(entry, at) if kind == "blend" else _number(entry, number_key, at)
        if "join" in entry:
            leaves, mode = _join(entry, base, split_part, inherited, at, joined)
        else:
            leaves, mode = _reference(entry, base, split_part, inherited, stack, at, allowed)
        if mode not in ("single", _MODE[kind]):
            inner = "an epochized" if mode == "epochized" else "a weighted"
            raise (at / "path").error(
                f"{short_repr(entry['path'])} is {inner} blend inside a {kind}: a tree mixes "
                "either weights (blend) or repetitions (blend_epochized), never both"
            )
        numbers.append(number)
        results.append(leaves)
    if kind == "blend" and any(callable(n) for n in numbers):
        return _scheduled(numbers, results, where / kind, composition, unit), "weights"
    fixed = [n for n in numbers if not callable(n)]  # all of them (checked above)
    total = sum(fixed)
    if not math.isfinite(total):
        raise (where / kind).error(f"the {number_key}s sum to {total}; use smaller numbers")
    out = []
    for index, (number, leaves) in enumerate(zip(fixed, results)):
        for leaf in leaves:
            if kind == "blend":
                _set_options(leaf, composition, unit)
                if isinstance(leaf.weight, LeafShare):  # a schedule further down the tree
                    leaf.weight.factor *= number / total
                    out.append(leaf)
                    continue
                assert not callable(leaf.weight)  # LeafShare is the one callable weight
                if leaf.given_weight is None:
                    leaf.given_weight = number
                leaf.weight = (leaf.weight or 1.0) * number / total
                if not leaf.weight > 0:  # underflow: the leaf would silently never be drawn
                    raise (where / kind / index / number_key).error(
                        f"{short_repr(number)} of a total {total:g} gives {leaf.path} a share "
                        "of 0; use weights of similar magnitude"
                    )
            else:
                leaf.repetitions = (leaf.repetitions or 1) * number
                if leaf.repetitions > MAX_REPETITIONS:
                    raise (where / kind / index / number_key).error(
                        f"{short_repr(number)} gives {leaf.path} {leaf.repetitions:g} "
                        f"repetitions per epoch (with the levels below), more than "
                        f"{MAX_REPETITIONS}; lower the repetitions of the other entries instead"
                    )
            out.append(leaf)
    return out, _MODE[kind]


def _blend_options(node: dict[str, Any], where: _Where) -> tuple[str | None, str | None]:
    """A blend's ``batch_composition`` and ``weight_unit`` (None where not given)."""
    out: list[str | None] = []
    for key, allowed in (("batch_composition", COMPOSITIONS), ("weight_unit", WEIGHT_UNITS)):
        value = node.get(key)
        if value is not None and value not in allowed:
            raise (where / key).error(f"{short_repr(value)}; allowed: {list(allowed)}")
        out.append(value)
    return out[0], out[1]


def _set_options(leaf: Leaf, composition: str | None, unit: str | None) -> None:
    """An outer blend's options win over a nested one's (the outer level runs last)."""
    if composition is not None:
        leaf.composition = composition
    if unit is not None:
        leaf.weight_unit = unit


def _weight(entry: dict[str, Any], where: _Where) -> float | WeightSchedule:
    """A ``blend`` entry's weight: a number > 0, a ``{schedule: ..., interpolate: ...}``
    mapping or (a metadataset given as a mapping in code) a ``weight_at(step)`` callable."""
    weight = entry.get("weight", 1)
    at = where / "weight"
    if callable(weight):
        return weight
    if not isinstance(weight, dict):
        return _number(entry, "weight", where)
    _check_keys(weight, ("schedule", "interpolate"), at)
    if "schedule" not in weight:
        raise at.error("needs schedule: [[at, weight], ...] (and optionally interpolate:)")
    try:
        return WeightSchedule(weight["schedule"], weight.get("interpolate", "linear"))
    except ConfigError as exc:
        raise at.error(str(exc).removeprefix("WeightSchedule: ")) from None


def _scheduled(
    weights: list[Any],
    results: list[list[Leaf]],
    where: _Where,
    composition: str | None,
    unit: str | None,
) -> list[Leaf]:
    """The leaves of a ``blend`` list where some weight is a schedule: each leaf's weight
    becomes a ``LeafShare`` (this level's share at a step, times the levels below)."""
    try:
        check_siblings(weights, f"{where.file}: {where.keys}")
    except ConfigError as exc:
        raise DatasetFormatError(str(exc)) from None
    out = []
    for index, leaves in enumerate(results):
        for leaf in leaves:
            _set_options(leaf, composition, unit)
            level = (index, weights)
            if isinstance(leaf.weight, LeafShare):
                leaf.weight.levels.insert(0, level)
            else:  # a plain leaf (None) or a normalised share of a nested fixed blend
                leaf.weight = LeafShare([level], float(leaf.weight or 1.0))  # type: ignore[arg-type]
            out.append(leaf)
    return out


def _number(entry: dict[str, Any], key: str, where: _Where) -> float:
    """A blend entry's weight or repetitions: a finite number > 0."""
    number = entry.get(key, 1)  # Energon's defaults: weight 1, repetitions 1
    if key == "repetitions" and (isinstance(number, dict) or callable(number)):
        raise (where / key).error(
            "a schedule in a blend_epochized: its repetitions are exact quotas per epoch and "
            "cannot change over the run; use blend: with a weight schedule instead"
        )
    finite = False
    if not isinstance(number, bool) and isinstance(number, (int, float)):
        try:
            finite = math.isfinite(number) and number > 0
        except OverflowError:  # an integer beyond float range
            finite = False
    if not finite:
        got = "missing" if key not in entry else short_repr(number)
        raise (where / key).error(f"{got}; must be a finite number > 0 (e.g. 1, 2.5 or 0.5)")
    return number  # checked above


def _check_quotas(path: StoragePath, leaves: list[Leaf]) -> None:
    """Every leaf of a blend_epochized contributes samples to an epoch (see Blend.epochized)."""
    for leaf in leaves:
        count = len(open_source(leaf))
        if epoch_quota(leaf, count) == 0:  # as the Blend plans it
            raise DatasetFormatError(
                f"{path}: blend_epochized: {leaf.path} (split {short_repr(leaf.split_part)}) has "
                f"repetitions {leaf.repetitions:g} (multiplied down the tree) x {count} samples "
                "= no sample per epoch; raise its repetitions or leave it out"
            )


def _reference(
    ref: dict[str, Any],
    base: StoragePath,
    split_part: str,
    inherited: _Inherited,
    stack: tuple[StoragePath, ...],
    where: _Where,
    allowed: tuple[str, ...],
) -> tuple[list[Leaf], str]:
    _check_keys(ref, allowed, where)
    raw = ref["path"]
    if not isinstance(raw, str) or not raw or "\0" in raw:
        raise (where / "path").error(f"{short_repr(raw)}; must be a path relative to {base}")
    target = join(base, raw)  # may be remote
    split_part = _string(ref, "split_part", where) or split_part
    subflavors = ref.get("subflavors")
    if subflavors is not None and not isinstance(subflavors, dict):
        raise (where / "subflavors").error(
            f"{short_repr(subflavors)}; must be a mapping of names to values"
        )
    if subflavors or inherited.subflavors:
        subflavors = {**(subflavors or {}), **(inherited.subflavors or {})}  # outer wins
    multiplier = _multiplier(ref, inherited.multiplier, where)
    nested = target.suffix in (".yaml", ".yml") and target.is_file()
    relative = _merge_subset(ref, inherited, where, folder=not nested)
    inner = _Inherited(subflavors or None, relative, multiplier, inherited.open_leaves)
    if nested:
        for key in ("dataset_config", "split_config"):
            if key in ref:
                raise (where / key).error("only allowed with a dataset folder, not a metadataset")
        if target in stack:
            chain = " -> ".join(str(p) for p in (*stack, target))
            raise (where / "path").error(f"cycle of nested metadatasets: {chain}")
        if len(stack) >= MAX_NESTING:
            raise (where / "path").error(
                f"metadatasets nested more than {MAX_NESTING} files deep (from {stack[0]})"
            )
        return _load_file(target, split_part, inner, (*stack, target))
    aux = parse_aux(ref.get("aux"), base, where / "aux")
    if not inherited.open_leaves and target.suffix not in (".yaml", ".yml"):
        # traversal: the folder as written, not opened (it may not be there yet)
        return [Leaf(target, split_part, subflavors=inner.subflavors, aux=aux)], "single"
    if not target.exists():
        raise (where / "path").error(
            f"{target} does not exist; a prepared dataset folder or a .yaml"
        )
    try:
        prepared = resolve_path(target)
    except DatasetFormatError as exc:
        raise (where / "path").error(str(exc)) from None
    if not prepared.is_file() and not (prepared / META_DIR).is_dir():  # files: JSONL, lists
        raise (where / "path").error(
            f"{target} has no {META_DIR}; run `energon-lite prepare` on it"
        )
    leaf = Leaf(
        prepared,
        split_part,
        subflavors=inner.subflavors,
        shuffle_over_epochs_multiplier=multiplier,
        split_config=_string(ref, "split_config", where) or "split.yaml",
        dataset_config=_string(ref, "dataset_config", where) or "dataset.yaml",
        aux=aux,
    )
    leaf.subset = _resolve_subset(leaf, ref, inner.relative, where)
    return [leaf], "single"


def _join(
    node: dict[str, Any],
    base: StoragePath,
    split_part: str,
    inherited: _Inherited,
    where: _Where,
    allowed: tuple[str, ...],
) -> tuple[list[Leaf], str]:
    """A ``join:`` of datasets (energon_lite.metadataset.join) as one leaf."""
    from energon_lite.metadataset.join import join_leaf

    _check_keys(node, allowed, where)
    if not (isinstance(base, Path) and isinstance(where.file, Path)):  # match index beside it
        raise where.error(f"join: needs a local metadataset; {base} is remote")
    subflavors = {**(node.get("subflavors") or {}), **(inherited.subflavors or {})}
    leaf = join_leaf(node, base, split_part, where.file, subflavors or None, where)
    leaf.shuffle_over_epochs_multiplier = inherited.multiplier
    relative = _merge_subset(node, inherited, where, folder=True)
    leaf.subset = _resolve_subset(leaf, node, relative, where)
    return [leaf], "single"


def _resolve_subset(
    leaf: Leaf, ref: dict[str, Any], relative: tuple[float, float] | None, where: _Where
) -> tuple[int, int] | None:
    """Open the leaf's split (checks it) and turn absolute-then-relative ranges into indices."""
    try:
        dataset = open_source(leaf)
    except DatasetFormatError as exc:
        raise (where / "split_part").error(f"split {short_repr(leaf.split_part)}: {exc}") from None
    total = len(dataset)
    if total == 0:
        raise (where / "split_part").error(
            f"split {short_repr(leaf.split_part)} of {leaf.path} is empty"
        )
    absolute = _parse_subset(ref, where)[1] if "subset" in ref else None
    if absolute is None and relative is None:
        return None
    start, end = 0, total
    if absolute is not None:
        start, end = absolute[0], total if absolute[1] is None else absolute[1]
        if not 0 <= start <= end <= total:
            raise (where / "subset").error(
                f"range [{start}, {end}) outside the split's {total} samples"
            )
    if relative is not None:
        span = end - start
        start, end = start + int(span * relative[0]), start + int(span * relative[1])
    if start == end:
        raise (where / "subset").error(f"selects no samples of {leaf.path} ({total} in the split)")
    return start, end


def _parse_subset(ref: dict[str, Any], where: _Where) -> tuple[tuple[float, float] | None, Any]:
    """``(relative range, absolute range)`` of a ``subset:``; exactly one is set."""
    at = where / "subset"
    value = ref["subset"]
    if isinstance(value, dict):
        _check_keys(value, ("range",), at)
        if "range" in value:
            value, at = value["range"], at / "range"
    if not isinstance(value, list) or len(value) != 2:
        raise at.error(
            f"{short_repr(value)}; allowed: {{range: [0%, 50%]}} or {{range: [100, end]}}"
        )
    start, end = value
    if isinstance(start, int) and not isinstance(start, bool):
        if end != "end" and (isinstance(end, bool) or not isinstance(end, int)):
            raise at.error(f"{short_repr(value)}: an absolute range ends with an integer or 'end'")
        return None, (start, None if end == "end" else end)
    bounds = []
    for bound in value:
        text = str(bound).strip()
        try:
            fraction = 1.0 if text == "end" else float(text.removesuffix("%")) / 100.0
        except ValueError:
            fraction = -1.0
        if (not text.endswith("%") and text != "end") or not 0 <= fraction <= 1:
            raise at.error(
                f"{short_repr(value)}: bound {short_repr(bound)}; allowed: 'N%' with 0 <= N <= 100, or 'end'"
            )
        bounds.append(fraction)
    if bounds[0] > bounds[1]:
        raise at.error(f"{short_repr(value)}: start after end")
    return (bounds[0], bounds[1]), None


def _merge_subset(
    node: dict[str, Any], inherited: _Inherited, where: _Where, folder: bool
) -> tuple[float, float] | None:
    """This level's relative range with the outer one applied inside it (Energon's merge)."""
    if "subset" not in node:
        return inherited.relative
    relative, absolute = _parse_subset(node, where)
    if absolute is not None:
        if not folder:
            shown = [absolute[0], "end" if absolute[1] is None else absolute[1]]
            raise (where / "subset").error(
                f"{shown}: an absolute range is only allowed for a leaf dataset (a dataset "
                "folder or file), not on a blend or a metadataset (as in Energon); give a "
                "relative range ('N%') here"
            )
        return inherited.relative
    assert relative is not None  # _parse_subset returns one of the two
    if inherited.relative is None:
        return relative
    span = relative[1] - relative[0]
    outer = inherited.relative
    return relative[0] + outer[0] * span, relative[0] + outer[1] * span


def _multiplier(ref: dict[str, Any], outer: int | None, where: _Where) -> int | None:
    if "shuffle_over_epochs_multiplier" not in ref:
        return outer
    value = ref["shuffle_over_epochs_multiplier"]
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or value == 0 or value < -1
    ):
        raise (where / "shuffle_over_epochs_multiplier").error(
            f"{short_repr(value)}; allowed: null (no shuffle), -1 (with replacement) or an integer >= 1"
        )
    if value is None or outer is None:
        return None
    if value == -1 or outer == -1:
        return -1
    return value * outer


def _string(ref: dict[str, Any], key: str, where: _Where) -> str | None:
    value = ref.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise (where / key).error(f"{short_repr(value)}; must be a non-empty string")
    return value


def _check_keys(node: dict[str, Any], allowed: tuple[str, ...], where: _Where) -> None:
    problem = unknown_keys(node, allowed)
    if problem:
        first = next(k for k in node if k not in allowed)
        raise (where / first).error(problem)
