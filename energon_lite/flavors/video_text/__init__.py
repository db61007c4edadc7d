"""Open-Sora's video-text dataset: a CSV of clips, indexed once, loaded like any dataset.

Modules, in the order data flows:

* ``prepare``      - ``prepare_video_text(csv)``: one pass into memory-mapped arrays;
* ``layout``       - where the index lives; recognising CSVs and prepared folders;
* ``source``       - ``VideoTextSource``: rows of a split as small raw samples;
* ``sample``       - ``VideoTextSample``: one row; decodes only the frames asked for;
* ``transforms``   - ``sample_frame_indices`` / ``stride_frame_indices``, ``resize_crop`` and
  the named transforms;
* ``bucket_weights`` - bucket counts of a table: the weights of synchronised buckets;
* ``task_encoder`` - ``VideoTextTaskEncoder``: bucketed ``(B, 3, T, H, W)`` batches;
* ``opensora``     - Open-Sora's ``VariableVideoTextDataset`` / ``prepare_dataloader``.

See ``docs/video_text.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from energon_lite.flavors.lazy_exports import lazy_exports

if TYPE_CHECKING:  # the names below, for type checkers; at run time see __getattr__
    from energon_lite.flavors.video_text.layout import is_video_text, resolve_prepared
    from energon_lite.flavors.video_text.prepare import VideoTextReport, prepare_video_text
    from energon_lite.flavors.video_text.sample import VideoTextSample
    from energon_lite.flavors.video_text.source import VideoTextSource
    from energon_lite.flavors.video_text.task_encoder import VideoTextTaskEncoder
    from energon_lite.flavors.video_text.transforms import (
        resize_crop,
        sample_frame_indices,
        stride_frame_indices,
    )

# imported on first use (see flavors/lazy_exports.py): sample and task_encoder import torch
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "layout": ("is_video_text", "resolve_prepared"),
        "prepare": ("VideoTextReport", "prepare_video_text"),
        "sample": ("VideoTextSample",),
        "source": ("VideoTextSource",),
        "task_encoder": ("VideoTextTaskEncoder",),
        "transforms": ("resize_crop", "sample_frame_indices", "stride_frame_indices"),
    },
)

__all__ = [
    "VideoTextReport",
    "VideoTextSample",
    "VideoTextSource",
    "VideoTextTaskEncoder",
    "is_video_text",
    "prepare_video_text",
    "resize_crop",
    "resolve_prepared",
    "sample_frame_indices",
    "stride_frame_indices",
]
