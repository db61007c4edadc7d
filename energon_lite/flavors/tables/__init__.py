"""Datasets people already have, read in place: Parquet folders (the Hugging Face Hub layout
included), ``datasets.save_to_disk`` folders, MosaicML Streaming MDS and LitData chunks.

``get_train_dataset(folder)`` yields crude dict samples (every column by name, ``__key__`` =
``"<file>/<row>"``); ``energon-lite prepare --sample-type T --field-map '{...}' folder``
writes ``.nv-meta`` only, and the folder yields typed samples. See docs/formats.md.
"""

from __future__ import annotations

from energon_lite.flavors.tables.source import TableSource

__all__ = ["TableSource"]
