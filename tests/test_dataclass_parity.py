"""Every dataclass energon_lite exports that Energon also has keeps Energon's layout: field
names and order, keyword-only, defaults, slots and frozenness, with megatron-energon as the
oracle. User code subclasses these (``@dataclass class PackedBatch(Batch): ...``), so a
layout difference breaks code at class definition or silently makes a field optional."""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any, Dict, List  # noqa: UP035  (the real project's code, verbatim)

import pytest
import torch
from conftest import oracle

import energon_lite as el
import energon_lite.av as el_av
import energon_lite.media as el_media

energon = oracle()

# Where Energon defines the classes that its package root does not export.
ENERGON_HOMES = {
    "VQAOCRSample": "megatron.energon.flavors.vqa_and_ocr",
    "AVData": "megatron.energon.av.av_data",
    "Cooker": "megatron.energon.task_encoder.cooking",
    "SampleDecoder": "megatron.energon.flavors.webdataset.sample_decoder",
}

# Deliberate supersets, each keeping Energon's code working unchanged (the reason is the value).
EXTENSIONS: dict[tuple[str, str], str] = {
    ("Cooker", "condition"): "an extra defaulted field after Energon's: selects samples by a "
    "predicate besides has_subflavors",
    ("WorkerConfig", "kw_only"): "WorkerConfig(0, 1, 2) is accepted too; Energon's keyword calls "
    "are unchanged",
}


def _energon_class(name: str) -> Any:
    home = ENERGON_HOMES.get(name)
    if home is not None:
        return getattr(importlib.import_module(home), name)
    for module in (energon, energon.av, energon.media):
        if hasattr(module, name):
            return getattr(module, name)
    return None


def _exported_dataclasses() -> list[str]:
    """Names of the dataclasses in energon_lite's public modules that Energon has as dataclasses."""
    names: set[str] = set()
    for module in (el, el_av, el_media):
        for name in getattr(module, "__all__", ()):
            ours = getattr(module, name)
            if isinstance(ours, type) and dataclasses.is_dataclass(ours):
                theirs = _energon_class(name)
                if theirs is not None and dataclasses.is_dataclass(theirs):
                    names.add(name)
    return sorted(names)


def _ours(name: str) -> Any:
    for module in (el, el_av, el_media):
        if hasattr(module, name):
            return getattr(module, name)
    raise AssertionError(name)


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return ("factory", getattr(f.default_factory, "__name__", repr(f.default_factory)))
    if f.default is dataclasses.MISSING:
        return "required"
    if callable(f.default):
        return ("callable", f.default.__name__)  # e.g. the error handlers: ours and Energon's
    return ("value", f.default)


def _layout(cls: type, name: str) -> dict[str, Any]:
    public = [f for f in dataclasses.fields(cls) if not _private(f.name)]
    extra = {f.name for f in public if (name, f.name) in EXTENSIONS}
    public = [f for f in public if f.name not in extra]
    kw_only = (name, "kw_only") not in EXTENSIONS
    own_slots = cls.__dict__.get("__slots__")
    return {
        "fields": [(f.name, bool(f.kw_only) if kw_only else None, _default(f)) for f in public],
        "slots": None if own_slots is None else sorted(s for s in own_slots if not _private(s)),
        "frozen": cls.__dataclass_params__.frozen,  # type: ignore[attr-defined]
    }


def _private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")


# _exported_dataclasses() pinned, so that collecting the tests does not import Energon (the
# first test checks that the list is still exactly that).
EXPORTED = [
    "AVData", "AVMetadata", "Batch", "CaptioningSample", "Cooker", "ImageClassificationSample",
    "ImageMetadata", "ImageSample", "InterleavedSample", "MediaMetadataBase",
    "MultiChoiceVQASample", "OCRSample", "Sample", "SimilarityInterleavedSample", "SourceInfo",
    "TextSample", "VQAOCRSample", "VQASample", "VidQASample", "WorkerConfig",
]  # fmt: skip


def test_the_comparison_covers_the_data_model() -> None:
    expected = {"Sample", "Batch", "SourceInfo", "WorkerConfig", "Cooker", "AVData"}
    expected |= {
        name
        for name in el.__all__
        if name.endswith("Sample") and dataclasses.is_dataclass(getattr(el, name))
    }
    assert _exported_dataclasses() == EXPORTED
    assert expected <= set(EXPORTED)


@pytest.mark.parametrize("name", EXPORTED)
def test_exported_dataclass_has_energons_layout(name: str) -> None:
    assert _layout(_ours(name), name) == _layout(_energon_class(name), name)


def test_crude_sample_is_a_dict_as_in_energon() -> None:
    theirs = importlib.import_module("megatron.energon.flavors.crude").CrudeSample
    assert issubclass(el.CrudeSample, dict) and issubclass(theirs, dict)
    assert not dataclasses.is_dataclass(el.CrudeSample) and not dataclasses.is_dataclass(theirs)


def _packed_batch(lib: Any) -> type:
    """A real project's batch type: the key fields re-declared without defaults."""

    @dataclass
    class PackedBatch(lib.Batch):
        __key__: List[str]  # noqa: UP006
        __restore_key__: tuple
        __subflavors__: List[Dict]  # noqa: UP006
        tokens: torch.Tensor

    return PackedBatch


@pytest.mark.parametrize("lib", [el, energon], ids=["energon_lite", "energon"])
def test_batch_subclass_may_redeclare_key_fields(lib: Any) -> None:
    packed = _packed_batch(lib)
    batch = packed(
        __key__=["a", "b"], __restore_key__=(), __subflavors__=[{}, {}], tokens=torch.ones(2)
    )
    assert batch.__subflavors__ == [{}, {}] and batch.__sources__ is None
    with pytest.raises(TypeError, match="__subflavors__"):  # re-declared: no default leaks in
        packed(__key__=["a"], __restore_key__=(), tokens=torch.ones(1))


def test_redeclared_batch_has_the_same_fields_as_energons() -> None:
    ours, theirs = _packed_batch(el), _packed_batch(energon)
    assert _layout(ours, "PackedBatch") == _layout(theirs, "PackedBatch")


@pytest.mark.parametrize("lib", [el, energon], ids=["energon_lite", "energon"])
def test_batch_extend_keeps_the_base_fields(lib: Any) -> None:
    @dataclass
    class Tokens(lib.Batch):
        tokens: list[int]

    @dataclass
    class Weighted(Tokens):
        weight: float

    base = Tokens(__key__=["k"], __restore_key__=(), tokens=[1, 2])
    ext = Weighted.extend(base, weight=0.5)
    assert (ext.__key__, ext.tokens, ext.weight) == (["k"], [1, 2], 0.5)
