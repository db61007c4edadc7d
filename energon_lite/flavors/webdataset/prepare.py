"""Energon's index rows at ``megatron.energon.flavors.webdataset.prepare``: the records a
tar preparation hands to :class:`~energon_lite.flavors.webdataset.indexing.SqliteIndexWriter`.

energon_lite's own ``prepare`` writes ``.tar.idx`` files (``energon_lite/shards/prepare.py``);
these rows are for code that writes Energon's ``index.sqlite`` itself.
"""

from __future__ import annotations

from energon_lite.edataclass import edataclass


@edataclass
class IndexAggregatable:
    """The base of the rows a preparation yields."""


@edataclass
class IndexSample(IndexAggregatable):
    """One sample of a tar file: its key, its index in the tar and where its bytes are."""

    tar_file_id: int
    sample_key: str
    sample_index: int
    byte_offset: int
    byte_size: int


@edataclass
class IndexSamplePart(IndexAggregatable):
    """One part (file) of a sample: its name and where its content is in the tar."""

    tar_file_id: int
    sample_index: int
    part_name: str
    content_byte_offset: int
    content_byte_size: int


@edataclass
class IndexMediaMetadata(IndexAggregatable):
    """A media metadata record (``metadata_type`` ``"image"`` or ``"av"``, JSON payload)."""

    entry_key: str
    metadata_type: str
    metadata_json: str
