"""JSONL datasets and ``path label`` meta lists: a line index and a crude-sample Source.

``energon-lite prepare data.jsonl`` (or ``meta.txt --media-root DIR``) writes the index;
the file is then a dataset path of its own or a leaf of a metadataset, and its samples are
cooked by the TaskEncoder's cookers (``docs/crude_data.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from energon_lite.flavors.lazy_exports import lazy_exports

if TYPE_CHECKING:  # the names below, for type checkers; at run time see __getattr__
    from energon_lite.flavors.jsonl.factories import (
        CrudeJsonlDatasetFactory,
        DefaultCrudeJsonlDatasetFactory,
    )
    from energon_lite.flavors.jsonl.index import LineIndexInfo, prepare_lines
    from energon_lite.flavors.jsonl.layout import is_line_file
    from energon_lite.flavors.jsonl.source import JsonlFileStore, JsonlSource, parse_text_line

# Every name on first use: the registry imports this package (for ``kind``) in every loop
# that opens data, a plain tar folder's included
_MODULES = {
    "factories": ("CrudeJsonlDatasetFactory", "DefaultCrudeJsonlDatasetFactory"),
    "index": ("LineIndexInfo", "prepare_lines"),
    "layout": ("is_line_file",),
    "source": ("JsonlFileStore", "JsonlSource", "parse_text_line"),
}
__getattr__, __dir__ = lazy_exports(__name__, _MODULES)


__all__ = [
    "CrudeJsonlDatasetFactory",
    "DefaultCrudeJsonlDatasetFactory",
    "JsonlFileStore",
    "JsonlSource",
    "LineIndexInfo",
    "is_line_file",
    "parse_text_line",
    "prepare_lines",
]
