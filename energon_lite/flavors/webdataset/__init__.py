"""Energon's ``megatron.energon.flavors.webdataset`` names at the mirrored path: the dataset
factories, the decoder and its type names, ``WebdatasetMeta``, ``EmptyDatasetError``.

Not a dataset kind (it has no ``kind`` module): tar folders are the core's own format."""

from __future__ import annotations

from energon_lite.av import AVData, AVDecoder
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
