"""``VideoTextTaskEncoder``: Open-Sora's VariableVideoTextDataset as a TaskEncoder.

Hooks, in the order they run:

1. ``encode_sample(VideoTextSample) -> dict``: assign the sample's bucket first - a pure
   function of (``seed``, restore key, CSV shape), so no video is opened for a sample no
   bucket keeps (``SkipSample``) - then decode only the bucket's ``T`` frames
   (:func:`sample_frame_indices`, random window when training) and :func:`resize_crop` them
   to the bucket's ``(H, W)``; or, when the row names precomputed feature files, load those
   tensors instead of decoding video.
2. ``batch_group_criterion(encoded) -> (BucketId, batch_size)``: the bucket computed in 1.
3. ``batch(samples) -> {"video": (B, 3, T, H, W), "text": [...], "fps": [...], "__key__": [...]}``
   (plus one stacked tensor per feature column).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from energon_lite.collate import batch_pad_stack
from energon_lite.errors import ConfigError, SkipSample
from energon_lite.flavors.video_text.buckets import BucketAssigner, BucketConfig, BucketId
from energon_lite.flavors.video_text.sample import VideoTextSample
from energon_lite.flavors.video_text.source import PATH_SUFFIX
from energon_lite.flavors.video_text.transforms import resize_crop, sample_frame_indices
from energon_lite.samples import basic_sample_keys
from energon_lite.task_encoder import TaskEncoder

_MAX_DROPPED_IN_A_ROW = 1000


class VideoTextTaskEncoder(TaskEncoder[VideoTextSample, dict, dict, dict]):
    """Same-shape video batches from a bucket config (see the module docstring).

    ``frame_interval`` takes every n-th frame (Open-Sora's temporal stride); ``training``
    picks a random start window (else frame 0); ``random_crop`` crops at a random offset
    when training (else the centre). ``feature_columns`` name extra CSV columns with
    ``.pt``/``.npy`` files; None means every ``*_path`` column, ``()`` none.
    """

    decoder = None  # rows arrive as plain values; media is read in encode_sample

    def __init__(
        self,
        bucket_config: BucketConfig | Mapping[Any, Any],
        *,
        seed: int = 0,
        training: bool = True,
        frame_interval: int = 1,
        random_crop: bool = False,
        feature_columns: Sequence[str] | None = None,
    ) -> None:
        if frame_interval < 1:
            raise ValueError(f"{frame_interval=} must be >= 1")
        self.assigner = BucketAssigner(bucket_config, seed)
        self.training = training
        self.frame_interval = frame_interval
        self.random_crop = random_crop
        self.feature_columns = None if feature_columns is None else tuple(feature_columns)
        self._dropped_in_a_row = 0  # diagnostics only, not loader state

    def shape_of(self, sample: VideoTextSample) -> tuple[int, int, int]:
        """``(T, H, W)`` the sample can supply: ``T`` counts frames after the stride."""
        if sample.is_image or sample.num_frames == 1:
            return 1, sample.height, sample.width
        # A video stays a video (>= 2 frames) even when the stride leaves fewer.
        return max(2, sample.num_frames // self.frame_interval), sample.height, sample.width

    def features_of(self, sample: VideoTextSample) -> list[str]:
        columns = self.feature_columns
        if columns is None:
            columns = tuple(c for c in sample.extra if c.endswith(PATH_SUFFIX))
        return [c for c in columns if sample.extra.get(c)]

    def encode_sample(self, sample: VideoTextSample) -> dict[str, Any]:
        shape = self.shape_of(sample)
        bucket = self.assigner.assign(*shape, sample.__restore_key__)
        if bucket is None:
            self._dropped_in_a_row += 1
            if self._dropped_in_a_row > _MAX_DROPPED_IN_A_ROW:
                # Without this a config that fits no sample would loop forever, silently.
                raise ConfigError(
                    f"no bucket accepted the last {self._dropped_in_a_row} samples (this one: "
                    f"(T, H, W)={shape}); the bucket config's resolutions are too large or its "
                    "frame counts too long for this data"
                )
            raise SkipSample()
        self._dropped_in_a_row = 0
        out: dict[str, Any] = {
            **basic_sample_keys(sample),
            "text": sample.text,
            "fps": None if sample.fps is None else sample.fps / self.frame_interval,
            "bucket": bucket,
        }
        features = self.features_of(sample)
        if features:
            for column in features:
                out[column.removesuffix(PATH_SUFFIX)] = sample.load_feature(column)
            return out
        num_frames, height, width = bucket.target
        rng = self.sample_rng if self.training else None
        total = 1 if sample.is_image else sample.num_frames
        indices = sample_frame_indices(
            total, num_frames, frame_interval=self.frame_interval, rng=rng
        )
        frames = sample.read_frames(indices)
        crop = self.random_crop and self.training
        out["video"] = resize_crop(frames, (height, width), rng=self.sample_rng, random_crop=crop)
        return out

    def batch_group_criterion(self, sample: dict[str, Any]) -> tuple[BucketId, int]:
        bucket = sample["bucket"]
        return bucket, bucket.batch_size

    def batch(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "__key__": [s["__key__"] for s in samples],
            "__restore_key__": [s["__restore_key__"] for s in samples],
            "text": [s["text"] for s in samples],
            "fps": [s["fps"] for s in samples],
        }
        for name in samples[0]:
            if name.startswith("__") or name in ("text", "fps", "bucket"):
                continue
            values = [s[name] for s in samples]
            # one bucket -> one video shape; features may differ in length (padded)
            out[name] = torch.stack(values) if name == "video" else batch_pad_stack(values)
        return out
