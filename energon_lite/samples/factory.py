"""Builds typed samples from decoded parts, as a dataset's ``dataset.yaml`` says.

Three forms (docs/formats.md, "dataset.yaml"): ``sample_type`` + ``field_map`` (with ``json[a][0]`` access into
JSON parts), ``sample_type`` + ``sample_loader: file.py:function`` (+ ``part_filter``), or a
crude dataset (``__class__: CrudeWebdataset``) whose samples stay dicts of decoded parts
for the TaskEncoder's cookers. ``__module__: megatron.energon`` and ``energon_lite`` both
resolve to energon_lite's classes, so Energon datasets load unchanged.
"""

from __future__ import annotations

import contextlib
import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from energon_lite.decode import SampleDecoder
from energon_lite.epathlib import EPath
from energon_lite.errors import DatasetFormatError, short_repr
from energon_lite.samples.crude import CrudeSample
from energon_lite.samples.resolver import (
    PROBING_FACTORY,
    TASK_ENCODER_DECODER,
    check_trusted_module,
    inside_dataset,
    is_our_module,
    load_module_file,
    resolve_class,
    resolve_factory_class,
    trusted_joiner,
    upgrade_legacy_config,
)
from energon_lite.samples.types import source_record
from energon_lite.state.restore_key import SampleKey
from energon_lite.storage import StoragePath, as_path
from energon_lite.storage.ops import local_copy

_INDEX = re.compile(r"\[([^\]]*)\]")
CRUDE_CLASSES = ("CrudeWebdataset", "DefaultCrudeWebdataset")
PART_TYPES = "__part_types__"  # a source's config: ``SampleDecoder.decode``'s ``types``
_MAX_PART_SETS = 64  # sets of part names whose file-name suffixes a factory keeps


def _load_function(
    spec: str, meta_dir: StoragePath, where: str, modules: dict[str, ModuleType]
) -> Callable[..., Any]:
    file, sep, name = spec.partition(":")
    if not sep:
        raise DatasetFormatError(f"{where}: {spec!r} must look like 'file.py:function'")
    path: StoragePath
    if isinstance(meta_dir, Path):
        path = local = inside_dataset(file, meta_dir, where)
    else:  # a remote dataset: the same rule on the name, then a local copy to import
        if Path(file).is_absolute() or ".." in Path(file).parts:
            raise DatasetFormatError(
                f"{where}: {file!r} points outside the dataset folder {meta_dir.parent}; a "
                "dataset may only load code stored inside it"
            )
        path = meta_dir / file
        if not path.is_file():
            raise DatasetFormatError(f"{where}: {spec!r}: file {path} not found")
        local = local_copy(path)
    if path.stem not in modules:
        modules[path.stem] = load_module_file(Path(local), where)
    try:
        return getattr(modules[path.stem], name)
    except AttributeError:
        raise DatasetFormatError(f"{where}: {path} defines no function {name!r}") from None


def _parse_field(spec: str, where: str) -> tuple[str, list[str | int]]:
    part, _, rest = spec.partition("[")
    path: list[str | int] = []
    if rest:
        for item in _INDEX.findall("[" + rest):
            path.append(int(item) if item.lstrip("-").isdigit() else item.strip("'\""))
    if not part:
        raise DatasetFormatError(f"{where}: field_map value {spec!r} names no part")
    return part, path


def _check_top_level_class(config: dict[str, Any], where: str, root: Path | None) -> type | None:
    """A top-level ``__module__``/``__class__`` names the dataset class: the crude ones (and
    joins, which energon_lite writes itself), or the user's own factory class (imported as
    Energon imports it, :func:`resolve_factory_class`), which is returned. Anything else is
    refused rather than ignored: the file asks for a class that would not be used."""
    if "__module__" not in config and "__class__" not in config:
        return None
    module, cls = config.get("__module__", "megatron.energon"), config.get("__class__")
    known = (*CRUDE_CLASSES, "JoinedWebdataset")
    if (
        isinstance(module, str)
        and isinstance(cls, str)
        and not is_our_module(module)
        and "sample_type" not in config
    ):
        return resolve_factory_class(module, cls, where, root)
    if not isinstance(module, str) or not is_our_module(module) or cls not in known:
        raise DatasetFormatError(
            f"{where}: top-level __module__ {short_repr(module, 60)} / __class__ "
            f"{short_repr(cls, 60)} refused: a dataset.yaml may name only the dataset classes "
            f"{', '.join(CRUDE_CLASSES)} (megatron.energon) or your own importable subclass of "
            "DefaultDecoderWebdatasetFactory (without sample_type:); for typed samples remove "
            "the top-level __module__ and __class__ and use sample_type:"
        )
    return None


def _probe_decoder(cls: type, config: dict[str, Any], meta_dir: StoragePath, where: str) -> Any:
    """What the dataset's own factory class installs as ``self._decoder`` when built as
    Energon builds it from ``dataset.yaml`` (its ``__init__`` runs; the dataset is not opened
    again): the task encoder's decoder by default, ``None`` for raw bytes, or a callable
    taking the sample dict ``{part: bytes}`` (a webdataset ``Decoder``)."""
    options = {k: config[k] for k in ("field_map", "sample_loader", "part_filter") if k in config}
    token = PROBING_FACTORY.set(True)
    try:
        instance = cls(
            meta_dir.parent, split_part="train", training=False, worker_config=None, **options
        )
    except Exception as exc:
        raise DatasetFormatError(
            f"{where}: building the dataset class {cls.__module__}.{cls.__qualname__} failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    finally:
        PROBING_FACTORY.reset(token)
    decoder = getattr(instance, "_decoder", TASK_ENCODER_DECODER)
    if decoder is not None and decoder is not TASK_ENCODER_DECODER and not callable(decoder):
        raise DatasetFormatError(
            f"{where}: {cls.__qualname__}._decoder = {short_repr(decoder)} is not callable"
        )
    return decoder


class SampleFactory:
    """``build(raw, decoder, subflavors)``: a raw sample of one dataset -> typed sample or crude dict."""

    def __init__(
        self, config: dict[str, Any], meta_dir: StoragePath, allowed_modules: Sequence[str] = ()
    ) -> None:
        """``allowed_modules``: modules (trusted code) whose classes ``sample_type`` may name,
        besides energon_lite's types and classes of the dataset's own sample_loader file."""
        where = str(meta_dir / "dataset.yaml")
        config = upgrade_legacy_config(config, where)
        root = meta_dir.parent if isinstance(meta_dir, Path) else None
        dataset_class = _check_top_level_class(config, where, root)
        self.root = str(meta_dir.parent)
        self.crude = config.get("__class__") in CRUDE_CLASSES
        # what each part holds when its name is no extension (a table's columns; its source
        # puts them in the config it hands over, never in a dataset.yaml)
        self.types: dict[str, str] | None = config.get(PART_TYPES)
        self.sample_type: type | None = None
        self.fields: dict[str, tuple[str, list[str | int]]] = {}
        self.loader: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        self.part_filter: Callable[[str], bool] | None = None
        self.parts: frozenset[str] | None = None  # None: decode every part
        self.aux: dict[str, Any] = {}  # name -> FileStore, for cookers (a leaf's aux:)
        self.primary: Any = None  # the leaf's own dataset as a FileStore (set by the pipeline)
        # the first sample's index in the dataset of each shard (set by the pipeline), so a
        # source names the sample's index in the dataset as Energon's does
        self.shard_offsets: Sequence[int] | None = None
        self._source_path = EPath(meta_dir.parent)
        self.joined: list[tuple[SampleFactory, dict[str, Any] | None]] | None = None
        # the dataset's own factory class's decoder (TASK_ENCODER_DECODER: the task encoder's)
        self.own_decoder: Any = TASK_ENCODER_DECODER
        # (field, part) of each field when every field is a whole part (no json[...] paths)
        self._whole_parts: tuple[tuple[str, str], ...] | None = None
        self._suffixes: dict[tuple[str, ...], tuple[str, ...]] = {}  # part names -> ".ext"s
        if self.crude:
            return
        if config.get("__class__") == "JoinedWebdataset":  # a join: one factory per dataset
            self.joined = [
                (SampleFactory(p["config"], as_path(p["root"]) / ".nv-meta"), p.get("subflavors"))
                for p in config["partners"]
            ]
            self.join_names = [p["name"] for p in config["partners"]]
            self.by_name = bool(config.get("by_name"))
            self.joiner = _resolve_joiner(config["joiner"], str(meta_dir.parent), meta_dir)
            return
        if dataset_class is not None:
            self.own_decoder = _probe_decoder(dataset_class, config, meta_dir, where)
        elif "sample_type" not in config:
            raise DatasetFormatError(
                f"{where}: needs 'sample_type' (or __class__: CrudeWebdataset)"
            )
        modules: dict[str, ModuleType] = {}  # the dataset's own files, by stem
        if "field_map" in config:
            self.fields = {k: _parse_field(str(v), where) for k, v in config["field_map"].items()}
            self.parts = frozenset(part for part, _ in self.fields.values())
            if not any(path for _, path in self.fields.values()):
                self._whole_parts = tuple((name, part) for name, (part, _) in self.fields.items())
        elif "sample_loader" in config:
            self.loader = _load_function(config["sample_loader"], meta_dir, where, modules)
            if "part_filter" in config:
                self.part_filter = _load_function(config["part_filter"], meta_dir, where, modules)
        else:
            raise DatasetFormatError(f"{where}: needs 'field_map' or 'sample_loader'")
        if dataset_class is not None:
            self.sample_type = dataset_class.__sample_type__  # type: ignore[attr-defined]
            return
        own = next(iter(modules.items()), None)
        self.sample_type = resolve_class(
            config["sample_type"], where, own_module=own, allowed_modules=tuple(allowed_modules)
        )

    def build(
        self, raw: dict[str, Any], decoder: SampleDecoder | None, subflavors: dict | None
    ) -> Any:
        if self.joined is not None:
            return self._build_joined(raw, decoder, subflavors)
        if self.part_filter is not None:
            raw = {k: v for k, v in raw.items() if k.startswith("__") or self.part_filter(k)}
        decoded = self._decode(raw, decoder)
        key, restore_key = raw["__key__"], raw["__restore_key__"]
        source = source_record(
            self._source_path,
            self._index(restore_key) if isinstance(restore_key, SampleKey) else key,
            raw.get("__shard__", ""),
            self._file_names(raw, key),
        )
        if self.crude or self.loader is not None:
            keys = {
                "__key__": key,
                "__restore_key__": restore_key,
                "__subflavors__": subflavors,
                "__sources__": (source,),
            }
            if self.crude:
                crude = CrudeSample({**decoded, **keys})
                crude.aux_stores = self.aux
                crude.primary_store = self.primary
                return crude
            assert self.sample_type is not None and self.loader is not None
            fields = self.loader(decoded)
            if "__key__" in fields:  # as in Energon, a sample_loader may set the key (only)
                keys["__key__"] = fields["__key__"]
            fields = {k: v for k, v in fields.items() if not k.startswith("__")}
            return self.sample_type(**keys, **fields)
        assert self.sample_type is not None  # set whenever not crude
        values = None
        if self._whole_parts is not None:  # each field is one part, as it was decoded
            with contextlib.suppress(KeyError):  # a part is missing: the loop below names it
                values = {name: decoded[part] for name, part in self._whole_parts}
        if values is None:
            values = self._field_values(raw, decoded)
        return self.sample_type(
            __key__=key,
            __restore_key__=restore_key,
            __subflavors__=subflavors,
            __sources__=(source,),
            **values,
        )

    def _file_names(self, raw: dict[str, Any], key: Any) -> tuple[str, ...]:
        """``<key>.<part>`` of each part of ``raw``; the parts' suffixes are worked out once
        per set of part names (a dataset's samples mostly share one)."""
        names = tuple(raw)
        suffixes = self._suffixes.get(names)
        if suffixes is None:
            suffixes = tuple(f".{part}" for part in names if not part.startswith("__"))
            if len(self._suffixes) >= _MAX_PART_SETS:
                self._suffixes.clear()
            self._suffixes[names] = suffixes
        prefix = key if type(key) is str else f"{key}"
        return tuple([prefix + suffix for suffix in suffixes])

    def _field_values(self, raw: dict[str, Any], decoded: dict[str, Any]) -> dict[str, Any]:
        """Each field's value: its part, or the entry its path names in that part."""
        values = {}
        for name, (part, path) in self.fields.items():
            if part not in decoded:
                raise DatasetFormatError(
                    f"sample {raw['__key__']!r}: field {name!r} needs part {part!r}; "
                    f"the sample has {sorted(k for k in decoded if not k.startswith('__'))}"
                )
            value = decoded[part]
            try:
                for step in path:
                    value = value[step]
            except (KeyError, IndexError, TypeError) as exc:
                raise DatasetFormatError(
                    f"sample {raw['__key__']!r}: field {name!r}: {part}"
                    + "".join(f"[{s}]" for s in path)
                    + f" does not resolve ({type(exc).__name__}: {exc})"
                ) from None
            values[name] = value
        return values

    def _decode(self, raw: dict[str, Any], decoder: SampleDecoder | None) -> dict[str, Any]:
        if self.own_decoder is TASK_ENCODER_DECODER:
            return decoder.decode(raw, self.parts, self.types) if decoder is not None else raw
        if self.own_decoder is None:  # the dataset class decodes nothing: raw bytes
            return raw
        if self.parts is not None:  # as Energon: only the parts the fields read are decoded
            raw = {k: v for k, v in raw.items() if k.startswith("__") or k in self.parts}
        decoded = self.own_decoder(raw)
        if not isinstance(decoded, dict):
            raise DatasetFormatError(
                f"sample {raw['__key__']!r}: the dataset class's _decoder returned "
                f"{short_repr(decoded)}, not a dict of parts"
            )
        return decoded

    def _index(self, key: SampleKey) -> int:
        if self.shard_offsets is None:
            return key.sample
        return int(self.shard_offsets[key.shard]) + key.sample

    def _build_joined(
        self, raw: dict[str, Any], decoder: SampleDecoder | None, subflavors: dict | None
    ) -> Any:
        """Each dataset's sample (its own restore key: the partner's shard and index), joined."""
        assert self.joined is not None
        restore_key = raw["__restore_key__"]
        samples: list[Any] = []
        for position, ((factory, own), entry) in enumerate(zip(self.joined, raw["__join__"])):
            if entry is None:
                samples.append(None)
                continue
            key, parts, shard_name, shard, index = entry
            sub_key = restore_key._replace(shard=shard, sample=index)  # this dataset's own
            flavors = {**(own or {}), **(subflavors or {})} if position == 0 else own
            sub_raw = {"__key__": key, "__restore_key__": sub_key, "__shard__": shard_name, **parts}
            samples.append(factory.build(sub_raw, decoder, flavors or None))
        if self.by_name:
            joined = self.joiner(**dict(zip(self.join_names, samples)))
        else:
            joined = self.joiner(*samples)
        sources = tuple(
            info
            for sample in samples
            if sample is not None
            for info in (getattr(sample, "__sources__", None) or ())
        )
        if sources and hasattr(joined, "__sources__"):  # every dataset's files, in join order
            joined.__sources__ = sources
        return joined


def _resolve_joiner(spec: dict[str, Any], where: str, meta_dir: StoragePath) -> Callable[..., Any]:
    """``{__module__, __function__}`` or a Sample ``{__module__, __class__}`` (its ``from_joined``).

    Imported when it is the joiner trusted for this spec file (``trust_joiner``: the one the
    metadataset or the code that wrote the spec named), else only from trusted modules."""
    if spec != trusted_joiner(str(meta_dir.parent)):
        check_trusted_module(str(spec.get("__module__")), where, "the joiner")
    try:
        module = importlib.import_module(spec["__module__"])
        if "__function__" in spec:
            return getattr(module, spec["__function__"])
        cls = getattr(module, spec["__class__"])
    except (ImportError, AttributeError, KeyError) as exc:
        raise DatasetFormatError(f"{where}: cannot import the joiner {spec!r}: {exc}") from None
    joiner = getattr(cls, "from_joined", None)
    if joiner is None:
        raise DatasetFormatError(f"{where}: joiner class {cls.__name__} has no from_joined")
    return joiner


@dataclass
class LeafSpec:
    """How samples of one leaf dataset become typed samples (the ``Encode`` stage's per leaf;
    made where the pipeline is built, so it lives beside the factory, not with the stage)."""

    factory: SampleFactory
    subflavors: dict[str, Any] | None = None
