"""Energon's ``megatron.energon.flavors.webdataset`` names at the mirrored path: the dataset
factories, the decoder and its type names, ``WebdatasetMeta``, ``EmptyDatasetError``.

Not a dataset kind (it has no ``kind`` module): tar folders are the core's own format."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from energon_lite.compat.joined_factory import JoinedWebdatasetFactory
from energon_lite.compat.webdataset_factories import (
    BaseWebdatasetFactory,
    DefaultDecoderWebdatasetFactory,
    DefaultGenericWebdatasetFactory,
    StandardWebdatasetFactory,
)
from energon_lite.flavors.webdataset.empty_dataset_error import EmptyDatasetError
from energon_lite.flavors.webdataset.metadata import WebdatasetMeta
from energon_lite.flavors.webdataset.sample_decoder import (
    AVDecoderType,
    ImageDecoderType,
    SampleDecoder,
)

if TYPE_CHECKING:
    from energon_lite.av import AVData, AVDecoder


def __getattr__(name: str) -> Any:
    """``AVData`` and ``AVDecoder`` load PyAV (the ``av`` extra): only when asked for, so the
    other names here work without it."""
    if name in ("AVData", "AVDecoder"):
        import energon_lite.av

        return getattr(energon_lite.av, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AVData",
    "AVDecoder",
    "AVDecoderType",
    "BaseWebdatasetFactory",
    "DefaultDecoderWebdatasetFactory",
    "DefaultGenericWebdatasetFactory",
    "EmptyDatasetError",
    "ImageDecoderType",
    "JoinedWebdatasetFactory",
    "SampleDecoder",
    "StandardWebdatasetFactory",
    "WebdatasetMeta",
]
