"""Joins: ``join:`` in a metadataset matches prepared datasets by sample key.

``energon_lite.metadataset.join`` turns the YAML into a spec file; this flavor opens it as a
Source (``JoinedSource``) and builds the key-match index on first use. Energon's name for
the joined dataset is ``JoinedWebdatasetFactory``.
"""

from __future__ import annotations

from energon_lite.flavors.join.source import JoinedSource

JoinedWebdatasetFactory = JoinedSource

__all__ = ["JoinedSource", "JoinedWebdatasetFactory"]
