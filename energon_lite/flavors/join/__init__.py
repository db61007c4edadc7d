"""Joins: ``join:`` in a metadataset matches prepared datasets by sample key.

``energon_lite.metadataset.join`` turns the YAML into a spec file; this flavor opens it as a
Source (``JoinedSource``) and builds the key-match index on first use. Energon's name for
the joined dataset is ``JoinedWebdatasetFactory``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from energon_lite.flavors.join.source import JoinedSource

    JoinedWebdatasetFactory = JoinedSource


def __getattr__(name: str) -> Any:
    """The source on first use: the kind registry imports this package in every command that
    opens data, and the source's imports reach torch."""
    if name in ("JoinedSource", "JoinedWebdatasetFactory"):
        from energon_lite.flavors.join.source import JoinedSource

        return JoinedSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["JoinedSource", "JoinedWebdatasetFactory"]
