"""Energon's ``megatron.energon.dataset_config``: ``MAIN_FOLDER_NAME``, ``load_config`` and
``get_dataset_from_config`` over energon_lite's dataset factories.

``get_dataset_from_config(path, ...)`` gives the factory of a prepared folder (or of a JSONL
file); its ``build()`` is the dataset of decoded samples. ``load_config`` reads a YAML file
(or takes a dict), lays it over ``default_kwargs`` and makes the class its ``__class__``
names (else ``default_type``); classes come from energon_lite / ``megatron.energon`` or from
modules trusted with ``energon_lite.allow_sample_type_modules``, as in ``dataset.yaml``.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, TypeVar

from energon_lite.compat.webdataset_factories import (
    BaseCoreDatasetFactory,
    BaseWebdatasetFactory,
    DefaultDecoderWebdatasetFactory,
    DefaultGenericWebdatasetFactory,
    StandardWebdatasetFactory,
)
from energon_lite.epathlib import EPath
from energon_lite.errors import ConfigError, DatasetFormatError
from energon_lite.loader.api import get_val_dataset
from energon_lite.samples.crude import CrudeSample
from energon_lite.samples.resolver import check_trusted_module
from energon_lite.samples.types import SAMPLE_TYPES
from energon_lite.shards.meta import INFO_JSON, INFO_YAML, META_DIR, load_yaml
from energon_lite.sources.kinds import kind_of
from energon_lite.storage import as_path
from energon_lite.worker import WorkerConfig

T = TypeVar("T")

MAIN_FOLDER_NAME = META_DIR

# the classes a config may name from energon_lite / megatron.energon
_NAMED: dict[str, type] = {
    **SAMPLE_TYPES,
    "CrudeSample": CrudeSample,
    **{
        cls.__name__: cls
        for cls in (
            BaseCoreDatasetFactory,
            BaseWebdatasetFactory,
            StandardWebdatasetFactory,
            DefaultGenericWebdatasetFactory,
            DefaultDecoderWebdatasetFactory,
        )
    },
}
_OURS = ("energon_lite", "megatron.energon")


def _named_class(module: Any, name: Any, where: str) -> type:
    module, name = str(module or "energon_lite"), str(name)
    if any(module == m or module.startswith(m + ".") for m in _OURS):
        if name not in _NAMED:
            raise DatasetFormatError(
                f"{where}: __class__ {module}.{name} is not one of the classes a config may "
                f"name: {sorted(_NAMED)}"
            )
        return _NAMED[name]
    check_trusted_module(module, where, f"__class__ {name}")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise DatasetFormatError(f"{where}: cannot import {module}.{name}: {exc}") from None
    if not isinstance(cls, type):
        raise DatasetFormatError(f"{where}: {module}.{name} is not a class")
    return cls


def _value(value: Any, where: str) -> Any:
    """Nested ``{__module__, __class__}`` entries: the class alone, or an instance of it."""
    if isinstance(value, dict):
        if "__class__" in value:
            rest = {k: v for k, v in value.items() if k not in ("__module__", "__class__")}
            cls = _named_class(value.get("__module__"), value["__class__"], where)
            return cls(**{k: _value(v, where) for k, v in rest.items()}) if rest else cls
        return {k: _value(v, where) for k, v in value.items()}
    if isinstance(value, list):
        return [_value(v, where) for v in value]
    return value


def load_config(
    path: EPath | str | os.PathLike[str] | dict[str, Any],
    *,
    default_type: type[T],
    default_kwargs: dict[str, Any] | None = None,
    parser: Any = None,
) -> T:
    """The object a config file (or dict) describes: ``default_type`` (or its ``__class__``)
    made with ``default_kwargs`` overridden by the config's keys. ``parser`` is Energon's
    JSON parser argument; the parsing here is always strict (unknown keys are the class's
    own TypeError)."""
    del parser
    if isinstance(path, dict):
        data, where = dict(path), "config"
    else:
        where = str(as_path(path))
        data = load_yaml(as_path(path))
        if not isinstance(data, dict):
            raise DatasetFormatError(
                f"{where}: a config must be a mapping, got {type(data).__name__}"
            )
    merged = {**(default_kwargs or {}), **data}
    cls: type = default_type
    if "__class__" in merged:
        cls = _named_class(merged.pop("__module__", None), merged.pop("__class__"), where)
    else:
        merged.pop("__module__", None)
    try:
        made: T = cls(**{k: _value(v, where) for k, v in merged.items()})
    except TypeError as exc:
        raise ConfigError(f"{where}: {cls.__name__}: {exc}") from None
    return made


def get_dataset_from_config(
    path: EPath | str | os.PathLike[str],
    *,
    dataset_config: str | None = None,
    split_config: str | None = None,
    split_part: str | None = None,
    training: bool = True,
    subflavors: dict[str, Any] | None = None,
    worker_config: WorkerConfig,
    sample_type: type | None = None,
    **kwargs: Any,
) -> BaseCoreDatasetFactory:
    """The dataset factory of a prepared folder or a JSONL file (Energon's function):
    ``.build()`` gives the dataset of decoded samples. ``sample_type`` only checks the type
    (ConfigError naming both). A folder that is not prepared is a DatasetFormatError."""
    where = as_path(path)
    line_file = kind_of(where).name == "jsonl"  # through the kind registry (a local file)
    if line_file:
        for name, value in (("dataset_config", dataset_config), ("split_config", split_config)):
            if value is not None:
                raise ConfigError(f"{where}: a JSONL dataset has no {name}; got {value!r}")
        if sample_type is not None and not issubclass(CrudeSample, sample_type):
            raise ConfigError(f"{where}: a JSONL dataset holds CrudeSample, not {sample_type}")
        split_part = "train"  # a line file is one split, whatever is asked (as in Energon)
    elif not any((where / META_DIR / name).is_file() for name in (INFO_JSON, INFO_YAML)):
        raise DatasetFormatError(
            f"{where} does not contain a {META_DIR}/{INFO_YAML} or {INFO_JSON} file nor is it "
            "a jsonl file; prepare it first (`energon-lite prepare`)"
        )
    factory_type = BaseCoreDatasetFactory if line_file else StandardWebdatasetFactory
    factory: BaseCoreDatasetFactory[Any] = factory_type(
        where,
        split_part=split_part or "train",
        training=training,
        worker_config=worker_config,
        subflavors=subflavors,
        split_config=split_config,
        dataset_config=dataset_config,
        **kwargs,
    )
    if sample_type is not None and not line_file:
        get_val_dataset(  # checks the type dataset.yaml names; reads no sample
            where,
            worker_config=worker_config,
            batch_size=None,
            split_part=split_part or "train",
            split_config=split_config or "split.yaml",
            dataset_config=dataset_config or "dataset.yaml",
            sample_type=sample_type,
        )
    return factory


__all__ = ["MAIN_FOLDER_NAME", "get_dataset_from_config", "load_config"]
