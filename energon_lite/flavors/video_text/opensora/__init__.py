"""Open-Sora's data-loading interface on energon_lite: bring the training script over as is.

The names and arguments are Open-Sora's (``opensora/datasets``); underneath is the ordinary
energon_lite pipeline (prepared memory-mapped tables, bucketed batches, savable state):

* :class:`VariableVideoTextDataset` - ``data_path`` (one CSV or a list), ``image_data_path``
  (image tables; ``num_frames`` may be absent), ``transform_name`` (``resize_crop``,
  ``center_crop``, ``random_crop``), ``frame_interval``, ``num_frames`` and ``image_size``
  for the fixed-shape mode, and ``temporal_sampling`` (``"window"`` or ``"stride"``).
  Tables are prepared on first use (and again when a CSV changed).
* :func:`prepare_dataloader` - ``(loader, sampler)``: with ``bucket_config`` a
  :class:`VariableBatchSampler` (bucketed, same bucket on every rank at each step by
  default), without it a :class:`StatefulDistributedSampler` (``batch_size`` clips of
  ``num_frames`` x ``image_size``).
* ``sampler.set_epoch(epoch)``, ``len(loader)`` steps per epoch, ``sampler.state_dict()`` /
  ``load_state_dict()`` resume exactly, mid-epoch included.

See ``docs/video_text.md``, "Coming from Open-Sora".
"""

from __future__ import annotations

from energon_lite.flavors.video_text.opensora.dataloader import (
    OpenSoraLoader,
    StatefulDistributedSampler,
    VariableBatchSampler,
    prepare_dataloader,
)
from energon_lite.flavors.video_text.opensora.dataset import VariableVideoTextDataset
from energon_lite.flavors.video_text.opensora.fixed import FixedShapeTaskEncoder

__all__ = [
    "FixedShapeTaskEncoder",
    "OpenSoraLoader",
    "StatefulDistributedSampler",
    "VariableBatchSampler",
    "VariableVideoTextDataset",
    "prepare_dataloader",
]
