"""Which classes a ``dataset.yaml`` may name, and Energon's legacy top-level ``*Webdataset`` form.

A dataset is untrusted input: its ``sample_type`` entries resolve only to energon_lite's (or
Energon's names of) built-in sample types, to classes defined in the dataset's own
``sample_loader`` file, or to modules the user lists in code (``allowed_modules=`` /
``allow_sample_type_modules``). Anything else is refused at open, before any import. Files a
dataset points at stay inside the dataset's folder.

A top-level ``__module__``/``__class__`` may also name the user's own dataset factory, as in
Energon: a class of importable code (installed or on ``sys.path``, never a file inside the
dataset's folder or a cache folder) that subclasses energon_lite's
``DefaultDecoderWebdatasetFactory`` family (:func:`resolve_factory_class`).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import warnings
from contextvars import ContextVar
from pathlib import Path
from types import ModuleType
from typing import Any

from energon_lite.errors import DatasetFormatError
from energon_lite.samples.types import SAMPLE_TYPE_NAMES, Sample, sample_type_named

OUR_MODULES = ("megatron.energon", "energon_lite")
# the base of every dataset factory a dataset.yaml may name (compat/, a layer above: by name)
FACTORY_BASE = "energon_lite.compat.webdataset_factories.BaseCoreDatasetFactory"
# set while a dataset's own factory class is built for what it installs (its ``_decoder``):
# the factory then skips opening the dataset, which the caller has opened already
PROBING_FACTORY: ContextVar[bool] = ContextVar("energon_lite_probing_factory", default=False)


class _TaskEncoderDecoder:
    """The default of a dataset factory's ``decoder``: parts are decoded by the task
    encoder's ``decoder`` (energon_lite's place for it), not by the factory."""

    def __repr__(self) -> str:
        return "TASK_ENCODER_DECODER"

    def __reduce__(self) -> str:
        # pickled by name, so a spawned worker's copy is the same object (callers test `is`)
        return "TASK_ENCODER_DECODER"


TASK_ENCODER_DECODER = _TaskEncoderDecoder()
_allowed: set[str] = set()
_trusted_joiners: dict[str, dict[str, Any]] = {}  # resolved join spec path -> its joiner

# Energon's deprecated dataset classes -> the sample type each one stands for.
LEGACY_WEBDATASETS = {
    "CaptioningWebdataset": "CaptioningSample",
    "ImageWebdataset": "ImageSample",
    "ImageClassificationWebdataset": "ImageClassificationSample",
    "InterleavedWebdataset": "InterleavedSample",
    "MultiChoiceVQAWebdataset": "MultiChoiceVQASample",
    "OCRWebdataset": "OCRSample",
    "SimilarityInterleavedWebdataset": "SimilarityInterleavedSample",
    "TextWebdataset": "TextSample",
    "VidQAWebdataset": "VidQASample",
    "VQAWebdataset": "VQASample",
    "VQAOCRWebdataset": "VQAOCRSample",
}


def allow_sample_type_modules(*modules: str) -> None:
    """Let every ``dataset.yaml`` of this process name classes from ``modules`` (trusted code
    of yours, e.g. ``"my_project.samples"``). Prefer listing them per dataset."""
    _allowed.update(modules)


def trust_joiner(spec_path: str | Path, joiner: dict[str, Any]) -> None:
    """Let the join spec file at ``spec_path`` import ``joiner``: called by whoever wrote the
    spec from what the user gave (a metadataset's ``joiner:`` entry, which Energon imports from
    any importable module, or a function handed to ``JoinedWebdatasetFactory``). A spec file
    read from a cache folder imports only the joiner trusted for it, so a spec planted or
    edited there imports nothing."""
    _trusted_joiners[str(Path(spec_path).resolve())] = dict(joiner)


def trusted_joiner(spec_path: str | Path) -> dict[str, Any] | None:
    """The joiner :func:`trust_joiner` recorded for the spec file at ``spec_path``, if any."""
    return _trusted_joiners.get(str(Path(spec_path).resolve()))


def is_our_module(module: str) -> bool:
    """Whether ``module`` is energon_lite's or Energon's."""
    return any(module == m or module.startswith(m + ".") for m in OUR_MODULES)


def check_trusted_module(module: str, where: str, what: str) -> None:
    """Refuse importing ``module`` for a data file unless it is ours, Energon's, or trusted
    by the user (:func:`allow_sample_type_modules`): a data file must not run other code."""
    if is_our_module(module) or module in _allowed:
        return
    raise DatasetFormatError(
        f"{where}: {what} from module {module!r} refused: a data file may name energon_lite / "
        f"megatron.energon code only; to trust {module!r}, call "
        f"energon_lite.allow_sample_type_modules({module!r})"
    )


def inside_dataset(file: str, meta_dir: Path, where: str) -> Path:
    """``meta_dir / file``, refused unless it stays inside the dataset's folder."""
    root = meta_dir.parent.resolve()
    path = (meta_dir / file).resolve()
    if not path.is_relative_to(root):
        raise DatasetFormatError(
            f"{where}: {file!r} points outside the dataset folder {root}; a dataset may only "
            "load code stored inside it"
        )
    return path


def load_module_file(path: Path, where: str) -> ModuleType:
    """Execute a dataset's own Python file (its ``sample_loader``) as a module."""
    if not path.is_file():
        raise DatasetFormatError(f"{where}: file {path} not found")
    spec = importlib.util.spec_from_file_location(f"energon_lite_user_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise DatasetFormatError(f"{where}: {path} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def resolve_class(
    spec: Any,
    where: str,
    *,
    own_module: tuple[str, ModuleType] | None = None,
    allowed_modules: tuple[str, ...] = (),
) -> type:
    """The class a ``{__module__, __class__}`` entry names, if the dataset may name it.

    ``own_module``: (module name as written in the YAML, i.e. the sample_loader file's stem;
    the loaded module): classes defined in it are allowed.
    """
    if not isinstance(spec, dict) or "__class__" not in spec:
        raise DatasetFormatError(f"{where}: sample_type needs '__module__' and '__class__'")
    module, name = str(spec.get("__module__", "energon_lite")), str(spec["__class__"])
    if module.startswith("energon_lite.") and module not in (
        "energon_lite.samples",
        "energon_lite.samples.types",
    ):
        allowed_modules = (*allowed_modules, module)  # our own code (e.g. a flavor's type)
    elif is_our_module(module):
        builtin = sample_type_named(name)
        if builtin is None:
            raise DatasetFormatError(
                f"{where}: sample_type {module}.{name} is not a built-in type; "
                f"known: {sorted(SAMPLE_TYPE_NAMES)}"
            )
        return builtin
    if own_module is not None and module == own_module[0]:
        cls = getattr(own_module[1], name, None)
        if isinstance(cls, type) and cls.__module__ == own_module[1].__name__:
            return cls
        raise DatasetFormatError(
            f"{where}: {module}.{name} is not a class defined in the dataset's {module}.py"
        )
    if module not in allowed_modules and module not in _allowed:
        raise DatasetFormatError(
            f"{where}: sample_type {module}.{name} refused: a dataset may name energon_lite / "
            "megatron.energon sample types and classes defined in its own sample_loader file; "
            f"to trust module {module!r}, pass allowed_modules=[{module!r}] or call "
            f"energon_lite.allow_sample_type_modules({module!r})"
        )
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise DatasetFormatError(
            f"{where}: cannot import sample_type {module}.{name}: {exc}"
        ) from None
    if not isinstance(cls, type):
        raise DatasetFormatError(f"{where}: {module}.{name} is not a class")
    if module.startswith("energon_lite.") and not issubclass(cls, Sample):
        raise DatasetFormatError(f"{where}: {module}.{name} is not a sample type")
    return cls


def is_dataset_factory(cls: type) -> bool:
    """Whether ``cls`` subclasses energon_lite's ``BaseCoreDatasetFactory``."""
    return any(f"{c.__module__}.{c.__qualname__}" == FACTORY_BASE for c in cls.__mro__)


def _planted_in(origin: str, root: Path) -> Path | None:
    """The dataset or cache folder that holds the module file ``origin``, if any."""
    file = Path(origin).resolve()
    folders = [root.resolve()]
    cache_dir = os.environ.get("ENERGON_LITE_CACHE_DIR")
    if cache_dir:
        folders.append(Path(cache_dir).resolve())
    folders += [p for p in file.parents if p.name.endswith(".cache") or p.name == ".nv-meta"]
    return next((f for f in folders if file.is_relative_to(f)), None)


def resolve_factory_class(module: str, name: str, where: str, root: Path | None) -> type:
    """The user's dataset factory class a top-level ``__module__``/``__class__`` names.

    Imported as Energon imports it (any importable module), except from a file inside the
    dataset's folder ``root``, a ``*.cache`` / ``.nv-meta`` folder or the node-local shard
    cache: a file planted there is data, not code. The class must subclass energon_lite's
    ``BaseCoreDatasetFactory`` (e.g. ``DefaultDecoderWebdatasetFactory[MySample]``)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        raise DatasetFormatError(f"{where}: cannot import __module__ {module!r}: {exc}") from None
    if spec is None:
        raise DatasetFormatError(
            f"{where}: __module__ {module!r} (for __class__ {name!r}) is not importable; "
            "install it or put it on PYTHONPATH"
        )
    planted = _planted_in(spec.origin, root or Path("/nonexistent")) if spec.origin else None
    if planted is not None:
        raise DatasetFormatError(
            f"{where}: __module__ {module!r} refused: its file {spec.origin} lies inside "
            f"{planted}, a dataset or cache folder; a dataset class must be installed code"
        )
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise DatasetFormatError(f"{where}: cannot import {module}.{name}: {exc}") from None
    if not isinstance(cls, type) or not is_dataset_factory(cls):
        raise DatasetFormatError(
            f"{where}: __class__ {module}.{name} refused: not a subclass of "
            "energon_lite's DefaultDecoderWebdatasetFactory (or BaseCoreDatasetFactory)"
        )
    if not isinstance(getattr(cls, "__sample_type__", None), type):
        raise DatasetFormatError(f"{where}: {module}.{name} sets no __sample_type__ class")
    return cls


def upgrade_legacy_config(config: dict[str, Any], where: str) -> dict[str, Any]:
    """A ``dataset.yaml`` with Energon's top-level ``__class__: CaptioningWebdataset`` (etc.)
    rewritten to ``sample_type:``, with a DeprecationWarning that shows the rewrite."""
    cls = config.get("__class__")
    if cls not in LEGACY_WEBDATASETS:
        return config
    module = config.get("__module__", "megatron.energon")
    if not is_our_module(str(module)):
        raise DatasetFormatError(
            f"{where}: __class__ {module}.{cls} refused: only megatron.energon / energon_lite "
            "dataset classes are known"
        )
    sample_type = LEGACY_WEBDATASETS[cls]
    warnings.warn(
        f"{where}: top-level __class__: {cls} is Energon's deprecated form. Rewrite the file "
        f"as: remove the top-level __module__ and __class__, add\nsample_type:\n"
        f"  __module__: megatron.energon\n  __class__: {sample_type}\nand keep the rest",
        DeprecationWarning,
        stacklevel=4,
    )
    upgraded = {k: v for k, v in config.items() if k not in ("__module__", "__class__")}
    upgraded["sample_type"] = {"__module__": "megatron.energon", "__class__": sample_type}
    return upgraded
