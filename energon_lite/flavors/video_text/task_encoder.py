"""``VideoTextTaskEncoder``: Open-Sora's VariableVideoTextDataset as a TaskEncoder.

Synchronised buckets by default: ``get_train_dataset`` asks the task encoder for its
``default_bucket_sync(path, split_part)``; with ``sync_buckets=True`` (the default) it counts
the table's samples per bucket (:mod:`~energon_lite.flavors.video_text.bucket_weights`)
and returns the weights with which every data-parallel rank draws the same bucket at each
step; for the aspect-ratio form these are the config's weights, and samples of buckets the
data over-supplies are thinned (``keep``). ``sync_buckets=False`` is the per-rank mode: each
rank fills whichever bucket is full first. An explicit ``get_train_dataset(bucket_sync=...)``
wins over both.

Hooks, in the order they run:

1. ``encode_sample(VideoTextSample) -> dict``: assign the sample's bucket first - a pure
   function of (``seed``, restore key, CSV shape), so no video is opened for a sample no
   bucket keeps (``SkipSample``) - then decode only the bucket's ``T`` frames
   (:func:`sample_frame_indices`, random window when training) and :func:`resize_crop` them
   to the bucket's ``(H, W)``, written straight into the clip's row of its bucket's next
   batch (``energon_lite/batching/group_slab.py``; a ``transform_name`` transform does;
   another transform's clip is copied into the batch); or, when the row names
   precomputed feature files, load those tensors instead of decoding video. A sample thinned by the synchronised mode is skipped
   before any file is opened too.
2. ``batch_group_criterion(encoded) -> (BucketId, batch_size)``: the bucket computed in 1.
3. ``batch(samples) -> {"video": (B, 3, T, H, W), "text": [...], "fps": [...], "__key__": [...]}``
   (plus one stacked tensor per feature column): the video is the bucket's batch the clips
   were written into when they are its rows in order, else a stack of copies (same values).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from energon_lite.batching.collate import batch_pad_stack, batch_stack
from energon_lite.batching.group_slab import GroupSlabs
from energon_lite.errors import ConfigError, SkipSample, logger
from energon_lite.flavors.video_text.buckets import BucketAssigner, BucketConfig, BucketId
from energon_lite.flavors.video_text.layout import is_video_text
from energon_lite.flavors.video_text.sample import VideoTextSample
from energon_lite.flavors.video_text.source import PATH_SUFFIX
from energon_lite.flavors.video_text.transforms import (
    TEMPORAL_SAMPLINGS,
    WRITES_INTO,
    frame_indices,
    get_transform,
)
from energon_lite.samples.types import basic_sample_keys
from energon_lite.task_encoder.base import TaskEncoder

if TYPE_CHECKING:
    from energon_lite.av.decoder_cache import DecoderCache

_MAX_DROPPED_IN_A_ROW = 1000


class VideoTextTaskEncoder(TaskEncoder[VideoTextSample, dict, dict, dict]):
    """Same-shape video batches from a bucket config (see the module docstring).

    ``temporal_sampling="window"`` takes every ``frame_interval``-th frame of a window;
    ``"stride"`` spreads the bucket's frames over the whole clip (``stride = total // T``).
    ``training`` picks a random start (else frame 0);
    ``random_crop`` crops at a random offset when training (else the centre), or
    ``transform_name`` names the spatial transform (``resize_crop``, ``center_crop``,
    ``random_crop``; see ``transforms.TRANSFORMS``). ``feature_columns`` name extra CSV
    columns with ``.pt``/``.npy`` files; None means every ``*_path`` column, ``()`` none.
    ``sync_buckets`` (default True): the same bucket on every rank at each step.
    ``open_videos`` (default 2): local videos each worker keeps open between samples, so
    samples of one file skip the open (``energon_lite.av.DecoderCache``); 0 keeps none.
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
        temporal_sampling: str = "window",
        transform_name: str | None = None,
        sync_buckets: bool = True,
        open_videos: int = 2,
    ) -> None:
        if frame_interval < 1:
            raise ConfigError(f"{frame_interval=} must be >= 1")
        if temporal_sampling not in TEMPORAL_SAMPLINGS:
            raise ConfigError(f"{temporal_sampling=} must be one of {TEMPORAL_SAMPLINGS}")
        self.assigner = BucketAssigner(bucket_config, seed)
        self.training = training
        self.frame_interval = frame_interval
        self.temporal_sampling = temporal_sampling
        if transform_name is None:
            transform_name = "random_crop" if random_crop else "resize_crop"
        self.transform_name = transform_name
        self.transform = get_transform(transform_name)
        self.feature_columns = None if feature_columns is None else tuple(feature_columns)
        self.sync_buckets = sync_buckets
        self.keep: dict[BucketId, float] | None = None  # thinning of the synchronised mode
        self._dropped_in_a_row = 0  # diagnostics only, not loader state
        if open_videos < 0:
            raise ConfigError(f"{open_videos=} must be >= 0")
        self.open_videos = open_videos
        self._videos: DecoderCache | None = None  # made in the worker, on first use
        # per bucket, the batch its clips are written into. Only while ``batch`` is this
        # class's own: a subclass that batches otherwise would never claim the slabs, and
        # each bucket would keep up to MAX_WAITING batch-sized ones alive in every worker
        own_batch = type(self).batch is VideoTextTaskEncoder.batch
        self._slabs: GroupSlabs | None = GroupSlabs() if own_batch else None

    def default_bucket_sync(
        self, path: str | os.PathLike[str], split_part: str
    ) -> dict[str, Any] | None:
        """``get_train_dataset``'s ``bucket_sync`` when none is given (module docstring)."""
        if not self.sync_buckets:
            return None
        if not is_video_text(path):
            logger.warning(
                "%s: synchronised buckets need the bucket counts of video-text tables; "
                "this loader uses the per-rank mode. Pass get_train_dataset(bucket_sync="
                "task_encoder.bucket_sync_for([(table, split), ...])) for a metadataset of "
                "tables read once per epoch each, or sync_buckets=False to silence this",
                path,
            )
            return None
        return self.bucket_sync_for([(path, split_part)])

    def bucket_sync_for(
        self, tables: Sequence[tuple[str | os.PathLike[str], str]]
    ) -> dict[str, Any]:
        """The synchronised-mode option for ``(table, split)`` pairs read once per pass each.

        Sets ``self.keep`` (the thinning of the aspect-ratio form); call it before the task
        encoder is handed to ``get_train_dataset``.
        """
        from collections import Counter

        from energon_lite.flavors.video_text.bucket_weights import (
            bucket_counts,
            describe,
            split_shapes,
            sync_weights,
        )

        found: Counter[BucketId] = Counter()
        rows = 0
        for path, split_part in tables:
            shapes, counts = split_shapes(path, split_part)
            found.update(bucket_counts(self.assigner, shapes, counts, self.frames_available))
            rows += int(counts.sum())
        weights, self.keep = sync_weights(self.assigner, found)
        if not weights:
            raise ConfigError(
                f"{[str(p) for p, _ in tables]}: no sample of the {rows} rows falls into a bucket "
                "with weight > 0; the bucket config does not fit these tables"
            )
        logger.info("synchronised buckets, P(bucket) = %s", describe(weights))
        return {"weights": weights}

    def frames_available(self, num_frames: int) -> int:
        """The ``T`` a clip of ``num_frames`` frames can supply under the temporal sampling."""
        if num_frames == 1:
            return 1
        if self.temporal_sampling == "stride":
            return num_frames
        # A video stays a video (>= 2 frames) even when the stride leaves fewer.
        return max(2, num_frames // self.frame_interval)

    def shape_of(self, sample: VideoTextSample) -> tuple[int, int, int]:
        """``(T, H, W)`` the sample can supply: ``T`` counts frames after the stride."""
        if sample.is_image:
            return 1, sample.height, sample.width
        return self.frames_available(sample.num_frames), sample.height, sample.width

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
        keep = None if self.keep is None else self.keep.get(bucket, 0.0)
        if keep is not None and self.assigner.thinned(bucket, keep, sample.__restore_key__):
            raise SkipSample()  # the synchronised mode draws this bucket less often
        out: dict[str, Any] = {
            **basic_sample_keys(sample),
            "text": sample.text,
            "fps": None if sample.fps is None else sample.fps / self._step(sample, bucket),
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
        indices = frame_indices(
            self.temporal_sampling, total, num_frames, frame_interval=self.frame_interval, rng=rng
        )
        frames = sample.read_frames(indices, self._open_videos())
        if self._slabs is None or self.transform not in WRITES_INTO:
            out["video"] = self.transform(frames, (height, width), rng)
            return out
        # straight into its row of the bucket's next batch, which ``batch`` then hands out
        # without copying (batching/group_slab.py)
        clip = (frames.shape[1], len(indices), height, width)
        row = self._slabs.row(bucket, bucket.batch_size, torch.float32, clip)
        try:
            out["video"] = self.transform(frames, (height, width), rng, out=row)  # type: ignore[call-arg]
        except BaseException:
            self._slabs.give_back(bucket, row)
            raise
        return out

    def _open_videos(self) -> DecoderCache | None:
        """The worker's few open local videos (``open_videos`` of them; 0: none kept)."""
        if self._videos is None and self.open_videos:
            from energon_lite.av.decoder_cache import DecoderCache

            self._videos = DecoderCache(self.open_videos)
        return self._videos

    def _step(self, sample: VideoTextSample, bucket: BucketId) -> float:
        """Frames of the clip per frame taken (for the output fps)."""
        if self.temporal_sampling == "window":
            return self.frame_interval
        return max(1, sample.num_frames // bucket.num_frames)

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
            # one bucket -> one video shape; features may differ in length (padded). The
            # clips were written into their bucket's batch; else stacked into the worker's
            # reused shared memory, not a fresh batch copied there again
            if name == "video":
                slabs = self._slabs
                slab = None if slabs is None else slabs.claim(samples[0]["bucket"], values)
                out[name] = batch_stack(values) if slab is None else slab
            else:
                out[name] = batch_pad_stack(values)
        return out
