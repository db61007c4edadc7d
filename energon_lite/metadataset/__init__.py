"""Metadataset YAML (Energon's ``MetadatasetV2`` and v1) read into a flat list of leaves and a
blend mode, with ``join:`` specs and ``aux:`` sources."""
