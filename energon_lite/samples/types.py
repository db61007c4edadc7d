"""Sample and Batch dataclasses and the built-in sample types (Energon's names and fields).

Every sample carries ``__key__`` (the bare sample key inside its shard), ``__restore_key__``
(a tuple of plain values that fetches the same sample again by random access) and
``__subflavors__`` (the metadataset's subflavors, or None).
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from energon_lite.batching.sources import register_slot
from energon_lite.edataclass import edataclass

if TYPE_CHECKING:  # torch is imported where a tensor is made (batching), not by the types
    from energon_lite.epathlib import EPath  # with the file stores that make one

T = TypeVar("T", bound="Sample")


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceInfo:
    """Where a sample was read from (Energon's ``__sources__`` entries): the dataset's
    ``EPath``, the sample's index in the dataset (all its shards in order) or an auxiliary
    file's name, the shard and the files read."""

    dataset_path: EPath | str  # EPath from energon_lite; a FileStore of your own may give a str
    index: int | str | None  # None for a file that is not a sample (an aux or cached file)
    shard_name: str | None  # None where the file is not in a shard
    file_names: tuple[str, ...]

    # a batch's records travel to the trainer as these columns (batching/sources.py)
    BATCH_COLUMNS: ClassVar[tuple[str, ...]] = (
        "dataset_path",
        "index",
        "shard_name",
        "file_names",
    )

    def to(self, *args: Any, **kwargs: Any) -> SourceInfo:
        """Itself: a record of where a sample came from stays on the host. Trainers that move
        a batch to the device (Lightning's ``transfer_batch_to_device``, Accelerate's
        ``send_to_device``) call ``to`` on what has it and otherwise rebuild dataclasses
        field by field, which a frozen one refuses; so batches pass them unchanged."""
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        # Every batch a worker sends carries one per sample: rebuilt in the trainer from a
        # plain tuple, not by dataclasses' generic __setstate__ (which looks up the fields
        # again for each one): about a third fewer instructions
        return (source_record, (self.dataset_path, self.index, self.shard_name, self.file_names))


_SOURCE_SETTERS = tuple(getattr(SourceInfo, name).__set__ for name in SourceInfo.BATCH_COLUMNS)


def source_record(
    dataset_path: EPath | str,
    index: int | str | None,
    shard_name: str | None,
    file_names: tuple[str, ...],
) -> SourceInfo:
    """``SourceInfo(dataset_path=..., ...)``, equal to it, made at a third of the cost (one per
    sample read): without the frozen dataclass's ``__init__``, each slot set by its descriptor,
    as a dataclass's own ``__init__`` and unpickling do."""
    record = object.__new__(SourceInfo)
    path, at, shard, files = _SOURCE_SETTERS
    path(record, dataset_path)
    at(record, index)
    shard(record, shard_name)
    files(record, file_names)
    return record


_source_info = source_record  # the name pickles made before source_record refer to


# Energon's layout: the key fields are keyword-only and live in slots, so a subclass may add
# fields without defaults, build samples by keyword, and re-declare a key field without a
# default (a slot leaves no class attribute behind for the re-declared field to inherit).
@edataclass
class Sample:
    """Base of all samples. Subclass it with ``@dataclass`` and add fields."""

    __key__: str
    __restore_key__: tuple[Any, ...]
    __subflavors__: dict[str, Any] | None = None
    __sources__: tuple[SourceInfo, ...] | None = None

    @classmethod
    def derive_from(cls: type[T], base_sample: Any, **fields: Any) -> T:
        """A new ``cls`` with ``fields``, and ``base_sample``'s key fields (a sample or a crude
        dict: ``__key__``, ``__restore_key__``, ``__subflavors__``, ``__sources__``) where
        ``fields`` does not give them."""
        return cls(**{**basic_sample_keys(base_sample), **fields})

    @classmethod
    def from_joined(cls: type[T], *args: Sample | None, **kwargs: Sample | None) -> T:
        """A ``cls`` from the samples of a join (Energon's default joiner, used when a join
        names a Sample class): the first, primary sample's fields, then each later sample's
        own fields over them (its key fields aside; a None, a partner left out, adds
        nothing), and every sample's ``__sources__`` in join order. The loader sets the
        restore key. Samples joined by name (keyword arguments) need a ``from_joined`` of
        your own: the default would drop the names."""
        if kwargs:
            raise TypeError(
                f"{cls.__name__}.from_joined joins samples given by position; got them by name "
                f"({', '.join(sorted(kwargs))}): join a list, or override from_joined"
            )
        if not args or args[0] is None:
            raise ValueError(f"{cls.__name__}.from_joined needs the primary sample first, not None")
        keys = {f.name for f in dataclasses.fields(Sample)}
        fields = _init_fields(args[0])
        for joined in args[1:]:
            if joined is not None:
                fields.update(
                    (name, value)
                    for name, value in _init_fields(joined).items()
                    if name not in keys
                )
        sources = [info for s in args if s is not None for info in (s.__sources__ or ())]
        fields["__sources__"] = tuple(sources) if sources else None
        return cls(**fields)

    @classmethod
    def extend(cls: type[T], src: Any, **fields: Any) -> T:
        """A ``cls`` holding every init field of ``src`` plus ``fields`` (Energon's ``extend``);
        ``cls`` must be ``type(src)`` or a subclass of it."""
        return _extend(cls, src, fields)

    def pin_memory(self: T) -> T:
        """A copy whose tensors are in pinned memory (the loader calls it when pinning)."""
        return _pinned(self)


def _init_fields(src: Any) -> dict[str, Any]:
    """``src``'s fields that its constructor takes, by name."""
    return {
        f.name: getattr(src, f.name)
        for f in dataclasses.fields(src)
        if f.init and typing.get_origin(f.type) is not ClassVar and f.type is not ClassVar
    }


def _extend(cls: type[Any], src: Any, fields: dict[str, Any]) -> Any:
    if not issubclass(cls, type(src)):
        raise TypeError(f"{cls.__name__}.extend: {type(src).__name__} is not a base of it")
    return cls(**{**_init_fields(src), **fields})


def basic_sample_keys(
    crude_sample: Any, additional_source_info: tuple[SourceInfo, ...] = ()
) -> dict[str, Any]:
    """``__key__``, ``__restore_key__``, ``__subflavors__`` and ``__sources__`` of a crude dict
    (or a sample; None where it has none): what a cooker forwards to the cooked sample.
    ``additional_source_info`` (the files a cooker read besides the sample's) is added to
    ``__sources__``."""
    if isinstance(crude_sample, dict):
        get = crude_sample.get
    else:

        def get(name: str, default: Any = None) -> Any:
            return getattr(crude_sample, name, default)

    keys = {
        "__key__": get("__key__"),
        "__restore_key__": get("__restore_key__"),
        "__subflavors__": get("__subflavors__"),
        "__sources__": get("__sources__"),
    }
    if additional_source_info:
        keys["__sources__"] = (*(keys["__sources__"] or ()), *additional_source_info)
    return keys


# The same layout as Sample (Energon's): a subclass may re-declare the key fields without
# defaults (``__subflavors__: List[Dict]``) and then add fields without defaults.
@edataclass
class Batch:
    """Base for user batch types: ``__key__`` and ``__restore_key__`` hold one entry per sample."""

    __key__: list[str]
    __restore_key__: list[Any]
    __subflavors__: list[Any] | None = None
    __sources__: tuple[SourceInfo, ...] | None = None

    @classmethod
    def from_samples(cls: type[Any], samples: list[Any], **fields: Any) -> Any:
        """A batch of ``samples``: key lists from the samples, the given ``fields``, and every
        other field of ``cls`` collated from the samples' field of that name (tensors padded
        and stacked, numbers and the rest listed), as Energon's ``Batch.from_samples``."""
        from energon_lite.batching.collate import generic_batch, merged_sources
        from energon_lite.state.restore_key import batch_restore_keys

        keys = [basic_sample_keys(s) for s in samples]
        for name in (f.name for f in dataclasses.fields(cls)):
            if name in fields or name.startswith("__"):
                continue
            column = [s[name] if isinstance(s, dict) else getattr(s, name) for s in samples]
            fields[name] = generic_batch(column)
        return cls(
            __key__=[k["__key__"] for k in keys],
            __restore_key__=batch_restore_keys([k["__restore_key__"] for k in keys]),
            __subflavors__=[k["__subflavors__"] for k in keys],
            __sources__=merged_sources([k["__sources__"] for k in keys]),
            **fields,
        )

    @classmethod
    def derive_from(cls: type[Any], base_batch: Any, **fields: Any) -> Any:
        """A new ``cls`` batch with ``fields``, and ``base_batch``'s key lists where ``fields``
        does not give them."""
        return cls(**{**basic_sample_keys(base_batch), **fields})

    @classmethod
    def extend(cls: type[Any], src: Any, **fields: Any) -> Any:
        """A ``cls`` holding every init field of ``src`` plus ``fields`` (Energon's ``extend``);
        ``cls`` must be ``type(src)`` or a subclass of it."""
        return _extend(cls, src, fields)

    def pin_memory(self) -> Any:
        """A copy whose tensors are in pinned memory (the loader calls it when pinning)."""
        return _pinned(self)


# a batch's records are made in the trainer when its __sources__ is first read
# (energon_lite/batching/sources.py); the slot itself is the dataclass's
register_slot(Sample)
register_slot(Batch)


def _pinned(value: Any) -> Any:
    torch = sys.modules.get("torch")  # no tensor exists before torch is imported
    if torch is not None and isinstance(value, torch.Tensor):
        return value.pin_memory()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _pinned(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **changes)
    if isinstance(value, dict):
        return {k: _pinned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_pinned(v) for v in value]
    return value


# The built-in types, with Energon's fields, live one per module in ``samples/builtin`` and are
# imported on first use (PEP 562), here and in ``energon_lite.samples``: a process makes only
# the types it uses (a plain tar loop makes one of 11; making a slotted dataclass costs about
# as much as importing a small module). Each keeps this module as its ``__module__``.
BUILTIN_MODULES: dict[str, str] = {
    "TextSample": "text",
    "ImageSample": "image",
    "CaptioningSample": "captioning",
    "ImageClassificationSample": "image_classification",
    "VQASample": "vqa",
    "VQAOCRSample": "vqa_ocr",
    "MultiChoiceVQASample": "multichoice_vqa",
    "VidQASample": "vid_qa",
    "OCRSample": "ocr",
    "InterleavedSample": "interleaved",
    "SimilarityInterleavedSample": "similarity_interleaved",
}
# the names of SAMPLE_TYPES, in its order
SAMPLE_TYPE_NAMES: tuple[str, ...] = ("Sample", *BUILTIN_MODULES)

if TYPE_CHECKING:  # the names below, for type checkers; at run time see __getattr__
    # every built-in type by name (``Sample`` first)
    SAMPLE_TYPES: dict[str, type[Sample]]


def sample_type_named(name: str) -> type[Sample] | None:
    """The built-in sample type called ``name`` (made now if it is the first use), or None."""
    if name == "Sample":
        return Sample
    if name not in BUILTIN_MODULES:
        return None
    cls: type[Sample] | None = globals().get(name)
    return cls if cls is not None else __getattr__(name)


def __getattr__(name: str) -> Any:
    """A built-in sample type, or ``SAMPLE_TYPES``, on first use (then a plain attribute)."""
    if name == "SAMPLE_TYPES":
        value: Any = {n: sample_type_named(n) for n in SAMPLE_TYPE_NAMES}
    elif name in BUILTIN_MODULES:
        module = importlib.import_module(f"energon_lite.samples.builtin.{BUILTIN_MODULES[name]}")
        value = getattr(module, name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *BUILTIN_MODULES, "SAMPLE_TYPES"})


def sample_field_names(cls: type) -> list[str]:
    """The user fields of a sample dataclass (without the key fields)."""
    return [f.name for f in dataclasses.fields(cls) if not f.name.startswith("__")]


# ``from energon_lite.samples.types import *`` gives every public name, the built-in sample
# types made on first use included (a star import reads them through ``__getattr__``)
__all__ = sorted(
    {name for name in globals() if not name.startswith("_")} | {*BUILTIN_MODULES, "SAMPLE_TYPES"}
)
