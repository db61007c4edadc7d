"""Media metadata records without any decoder: the types (``records.py``: ``ImageMetadata``,
``AVMetadata`` ...) and their table in ``.nv-meta/index.sqlite`` (``table.py``), importable
without PyAV, so that an image-only setup reads recorded metadata too. Users import them
from ``energon_lite.media`` (Energon's path)."""

from __future__ import annotations

from energon_lite.media_records.records import *  # noqa: F403 (the names in its __all__)
from energon_lite.media_records.records import __all__ as __all__
