"""Datasets people already have, read in place: Parquet folders (the Hugging Face Hub layout
included), ``datasets.save_to_disk`` folders, MosaicML Streaming MDS and LitData chunks.

``get_train_dataset(folder)`` yields crude dict samples (every column by name, ``__key__`` =
``"<file>/<row>"``); ``energon-lite prepare --sample-type T --field-map '{...}' folder``
writes ``.nv-meta`` only, and the folder yields typed samples. See docs/formats.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from energon_lite.flavors.lazy_exports import lazy_exports

if TYPE_CHECKING:  # for type checkers; at run time see __getattr__
    from energon_lite.flavors.tables.source import TableSource

# imported on first use (flavors/lazy_exports.py): the source imports the sample factory, and
# with it torch, which `energon-lite info` and the kind registry never need
__getattr__, __dir__ = lazy_exports(__name__, {"source": ("TableSource",)})

__all__ = ["TableSource"]
