"""Sample and Batch dataclasses and the built-in sample types (Energon's names and fields).

Every sample carries ``__key__`` (the bare sample key inside its shard), ``__restore_key__``
(a tuple of plain values that fetches the same sample again by random access) and
``__subflavors__`` (the metadataset's subflavors, or None).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

from energon_lite.collate import collate_values

T = TypeVar("T", bound="Sample")


@dataclass(frozen=True)
class SourceInfo:
    """Where a sample was read from (Energon's ``__sources__`` entries)."""

    dataset_path: str
    index: int | str
    shard_name: str
    file_names: tuple[str, ...]


# The key fields are keyword-only (as in Energon), so subclasses may add fields without
# defaults and build samples by keyword.
@dataclass(kw_only=True)
class Sample:
    """Base of all samples. Subclass it with ``@dataclass`` and add fields."""

    __key__: str
    __restore_key__: tuple[Any, ...]
    __subflavors__: dict[str, Any] | None = None
    __sources__: tuple[SourceInfo, ...] | None = None

    @classmethod
    def derive_from(cls: type[T], base: Any, **fields: Any) -> T:
        """A new ``cls`` that keeps ``base``'s key fields (sample or crude dict) plus ``fields``."""
        return cls(**basic_sample_keys(base), **fields)

    def pin_memory(self: T) -> T:
        """A copy whose tensors are in pinned memory (the loader calls it when pinning)."""
        return _pinned(self)


def basic_sample_keys(sample: Any) -> dict[str, Any]:
    """``__key__``, ``__restore_key__`` and ``__subflavors__`` of a sample or crude dict."""
    if isinstance(sample, dict):
        get = sample.get
    else:

        def get(name: str, default: Any = None) -> Any:
            return getattr(sample, name, default)

    return {
        "__key__": get("__key__"),
        "__restore_key__": get("__restore_key__"),
        "__subflavors__": get("__subflavors__"),
        "__sources__": get("__sources__"),
    }


@dataclass(kw_only=True)
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
        and stacked, numbers tensored, the rest listed), as Energon's ``Batch.from_samples``."""
        keys = [basic_sample_keys(s) for s in samples]
        for name in (f.name for f in dataclasses.fields(cls)):
            if name in fields or name.startswith("__"):
                continue
            column = [s[name] if isinstance(s, dict) else getattr(s, name) for s in samples]
            fields[name] = collate_values(column)
        sources = tuple(info for k in keys for info in (k["__sources__"] or ()))
        return cls(
            __key__=[k["__key__"] for k in keys],
            __restore_key__=[k["__restore_key__"] for k in keys],
            __subflavors__=[k["__subflavors__"] for k in keys],
            __sources__=sources or None,
            **fields,
        )

    @classmethod
    def derive_from(cls: type[Any], base: Any, **fields: Any) -> Any:
        """A new ``cls`` batch with ``base``'s key lists plus ``fields``."""
        return cls(**basic_sample_keys(base), **fields)

    def pin_memory(self) -> Any:
        """A copy whose tensors are in pinned memory (the loader calls it when pinning)."""
        return _pinned(self)


def _pinned(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.pin_memory()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _pinned(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **changes)
    if isinstance(value, dict):
        return {k: _pinned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_pinned(v) for v in value]
    return value


@dataclass
class TextSample(Sample):
    text: str = ""


@dataclass
class ImageSample(Sample):
    image: torch.Tensor | Any = None


@dataclass
class CaptioningSample(Sample):
    image: torch.Tensor | Any = None
    caption: str = ""


@dataclass
class ImageClassificationSample(Sample):
    image: torch.Tensor | Any = None
    label: int | None = None
    label_name: str | None = None


@dataclass
class VQASample(Sample):
    image: torch.Tensor | Any = None
    context: str = ""
    answers: list[str] | None = None
    answer_weights: torch.Tensor | None = None


@dataclass
class VidQASample(Sample):
    video: Any = None
    context: str = ""
    answers: list[str] | None = None
    answer_weights: torch.Tensor | None = None


@dataclass
class InterleavedSample(Sample):
    sequence: list[Any] = field(default_factory=list)


SAMPLE_TYPES: dict[str, type[Sample]] = {
    cls.__name__: cls
    for cls in (
        Sample,
        TextSample,
        ImageSample,
        CaptioningSample,
        ImageClassificationSample,
        VQASample,
        VidQASample,
        InterleavedSample,
    )
}


def edataclass(cls: type[T] | None = None, /, **options: Any) -> Any:
    """Energon's dataclass decorator: ``@dataclass`` with keyword-only fields, so a subclass
    may add fields without defaults after the key fields."""
    options.setdefault("kw_only", True)
    if cls is None:
        return lambda inner: dataclass(inner, **options)
    return dataclass(cls, **options)


def sample_field_names(cls: type) -> list[str]:
    """The user fields of a sample dataclass (without the key fields)."""
    return [f.name for f in dataclasses.fields(cls) if not f.name.startswith("__")]
