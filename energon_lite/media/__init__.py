"""Energon's ``megatron.energon.media``: media metadata types (``metadata.py``), the filter
that decides which files of a dataset are media and reads their metadata (``extractor.py``)
and the metadata index of a plain folder (``filesystem_prepare.py``).

The types are defined in ``energon_lite.media_records`` (below the decoder, which returns
them) and are the same objects here. Importing needs no PyAV; reading the metadata of a
video or audio file does (``energon-lite[av]``)."""

from __future__ import annotations

from energon_lite.media_records.records import *  # noqa: F403 (the names in its __all__)
from energon_lite.media_records.records import __all__ as __all__
