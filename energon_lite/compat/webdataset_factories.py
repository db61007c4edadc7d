"""Energon's dataset factory names as thin adapters over energon_lite's loaders.

* ``BaseWebdatasetFactory.prepare_dataset(parent_path, paths, split_parts_ratio=...)``:
  Energon's programmatic prepare (index the shards, write ``.info.json`` and the split
  config; ``dataset.yaml`` stays as it is, or is written empty for the caller to fill).
* ``StandardWebdatasetFactory(path, split_part=, training=, worker_config=, ...)`` and
  ``DefaultDecoderWebdatasetFactory``: ``build()`` gives the dataset of decoded samples
  (``get_train_dataset`` / ``get_val_dataset`` without batching); ``len()`` its samples.
  Each is ``Generic[T_sample]`` as in Energon (``DefaultDecoderWebdatasetFactory[MySample]``).
* A user's subclass (``__sample_type__``, a webdataset ``Decoder`` set as ``self._decoder``)
  named by a ``dataset.yaml``'s top-level ``__module__``/``__class__`` is built when the
  dataset loads, and its ``_decoder`` decodes that dataset's parts
  (``energon_lite.samples.factory``); the default (``decoder`` not given) leaves decoding to
  the task encoder's ``decoder``.
* ``CaptioningWebdataset`` etc.: the deprecated per-type classes; a ``dataset.yaml`` naming
  them loads with a deprecation warning (``energon_lite.samples.resolver``), and constructing
  one warns the same way.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import yaml

from energon_lite.errors import ConfigError, DatasetFormatError
from energon_lite.loader.api import SavableDataset, get_train_dataset, get_val_dataset
from energon_lite.samples.resolver import PROBING_FACTORY, TASK_ENCODER_DECODER
from energon_lite.samples.types import (
    CaptioningSample,
    ImageClassificationSample,
    ImageSample,
    InterleavedSample,
    MultiChoiceVQASample,
    OCRSample,
    Sample,
    SimilarityInterleavedSample,
    TextSample,
    VidQASample,
    VQAOCRSample,
    VQASample,
)
from energon_lite.shards.folder_lock import prepare_lock
from energon_lite.shards.meta import META_DIR, expand
from energon_lite.shards.prepare import (
    PrepareReport,
    _write_meta,
    is_prepared,
    scan_shards,
    split_by_patterns,
    split_by_ratio,
)
from energon_lite.shards.shard_record import make_record, write_record
from energon_lite.shards.tar_index import write_index
from energon_lite.sources.kinds import open_source
from energon_lite.sources.leaf import Leaf
from energon_lite.storage import RemotePath, as_path

T_sample = TypeVar("T_sample", covariant=True)


class BaseCoreDatasetFactory(Generic[T_sample]):
    """A dataset of decoded samples from one prepared folder (Energon's factory protocol)."""

    __sample_type__: ClassVar[type[Any] | None] = None

    def __init__(
        self,
        path: str | os.PathLike[str] | RemotePath,
        *,
        split_part: str = "train",
        training: bool = True,
        worker_config: Any,
        shuffle_over_epochs: int | None = 1,
        parallel_shard_iters: int | None = None,
        max_samples_per_sequence: int | None = None,
        subset: Any = None,
        split_config: str | None = None,
        part_filter: Any = None,
        subflavors: dict[str, Any] | None = None,
        dataset_config: str | None = None,
        shuffle_over_epochs_multiplier: int | None = None,
        **kwargs: Any,
    ) -> None:
        """Energon's keywords; ``shuffle_over_epochs_multiplier`` is the older name of
        ``shuffle_over_epochs``. ``subset`` and ``part_filter`` are taken from
        ``dataset.yaml`` / a metadataset here: given in code, they are refused."""
        if kwargs:
            raise ConfigError(
                f"{type(self).__name__}: unsupported arguments {sorted(kwargs)}; "
                "see docs/migration.md"
            )
        if subset is not None or part_filter is not None:
            given = "subset" if subset is not None else "part_filter"
            raise ConfigError(
                f"{type(self).__name__}({given}=...) is not supported; set it in the "
                "metadataset (subset:) or dataset.yaml (part_filter:)"
            )
        self.paths = [as_path(path)]  # a folder, a URL, a RemotePath or an EPath
        self.path = self.paths[0]
        self.split_part = split_part
        self.training = training
        self.worker_config = worker_config
        self.subflavors = subflavors
        if shuffle_over_epochs_multiplier is not None:
            shuffle_over_epochs = shuffle_over_epochs_multiplier
        self.shuffle_over_epochs = shuffle_over_epochs
        self.parallel_shard_iters = parallel_shard_iters
        self.max_samples_per_sequence = max_samples_per_sequence
        self.options = {
            "parallel_shard_iters": parallel_shard_iters,
            "max_samples_per_sequence": max_samples_per_sequence,
        }
        self.leaf = Leaf(
            self.paths[0],
            split_part,
            subflavors=subflavors,
            shuffle_over_epochs_multiplier=shuffle_over_epochs,
            split_config=split_config or "split.yaml",
            dataset_config=dataset_config or "dataset.yaml",
        )
        if not PROBING_FACTORY.get():  # (a dataset loading builds its class: opened already)
            open_source(self.leaf)  # the split exists

    def __len__(self) -> int:
        return len(open_source(self.leaf))

    def build(self, worker_rotation_offset: int = 0) -> SavableDataset:
        """The dataset of decoded samples (no batching), shuffled when ``training``."""
        if worker_rotation_offset:
            raise ConfigError("worker_rotation_offset is not supported by energon_lite")
        common = {
            "worker_config": self.worker_config,
            "batch_size": None,
            "split_part": self.split_part,
            "subflavors": self.subflavors,
            "split_config": self.leaf.split_config,
            "dataset_config": self.leaf.dataset_config,
        }
        if not self.training:
            return get_val_dataset(self.paths[0], **common)
        return get_train_dataset(
            self.paths[0],
            shuffle_buffer_size=None,
            max_samples_per_sequence=self.options["max_samples_per_sequence"],
            parallel_shard_iters=self.options["parallel_shard_iters"],
            shuffle_over_epochs_multiplier=self.leaf.shuffle_over_epochs_multiplier,
            **common,
        )


class BaseWebdatasetFactory(BaseCoreDatasetFactory[T_sample], Generic[T_sample]):
    """Adds Energon's programmatic ``prepare_dataset``."""

    @classmethod
    def prepare_dataset(
        cls,
        parent_path: str | os.PathLike[str],
        paths: Sequence[str],
        *,
        split_parts_ratio: Sequence[tuple[str, float]] | None = None,
        split_parts_patterns: Sequence[tuple[str, str]] | None = None,
        split_config: str = "split.yaml",
        shuffle_seed: int | None = 42,
        workers: int = 1,
        tar_index_only: bool = False,
        progress_fn: Any = None,
        media_filter: Any = None,
        fix_duplicates: bool = False,
        index_sqlite_tmp_path: Any = None,
    ) -> tuple[set[str], list[tuple[str, int]]]:
        """Index the shards ``paths`` (brace patterns, relative to ``parent_path``) and write
        ``.nv-meta``; returns (the part extensions seen, [(shard, sample count)]).

        ``media_filter`` (an ``energon_lite.media.extractor.MediaFilterConfig``) also records
        the metadata of the samples' media parts (``energon-lite prepare-media``).
        ``progress_fn`` and ``index_sqlite_tmp_path`` have nothing to do here (no sqlite
        sample index is built); ``fix_duplicates`` is refused.
        """
        if fix_duplicates:
            raise ConfigError(
                "prepare_dataset: fix_duplicates=True (tar rewriting) is not supported by "
                "energon_lite; rename duplicate keys before preparing"
            )
        if media_filter is not None:
            from energon_lite.cache.media_metadata import prepare_media  # needs PyAV
            from energon_lite.media.extractor import MediaFilterConfig

        if media_filter is not None and not isinstance(media_filter, MediaFilterConfig):
            raise ConfigError(
                f"prepare_dataset: media_filter={media_filter!r} must be a MediaFilterConfig "
                "(energon_lite.media.extractor)"
            )
        root = Path(parent_path)
        shards = expand(list(paths))
        missing = [name for name in shards if not (root / name).is_file()]
        if missing:
            raise DatasetFormatError(f"{root / missing[0]}: shard not found")
        with prepare_lock(root):  # the same guarantees as `energon-lite prepare`
            scans = list(scan_shards(root, shards, min(workers, 8), progress=False))
            for name, scan in zip(shards, scans):  # indexes first, .nv-meta last
                write_index(root / name, scan.offsets)
            parts: set[str] = set().union(*(s.parts for s in scans))
            report = PrepareReport(root, shards, [s.count for s in scans], parts)
            record = make_record(root, shards, scans)
            if tar_index_only:
                if is_prepared(root):
                    write_record(root / META_DIR, record)
            else:
                if (split_parts_ratio is None) == (split_parts_patterns is None):
                    raise ConfigError(
                        "give exactly one of split_parts_ratio and split_parts_patterns"
                    )
                if split_parts_ratio is not None:
                    report.split_parts = split_by_ratio(shards, split_parts_ratio, shuffle_seed)
                else:
                    report.split_parts = split_by_patterns(shards, split_parts_patterns or ())
                existing = root / META_DIR / "dataset.yaml"
                config = yaml.safe_load(existing.read_text()) if existing.is_file() else {}
                _write_meta(root, report, config or {}, [], record)
                if split_config != "split.yaml":
                    (root / META_DIR / "split.yaml").rename(root / META_DIR / split_config)
        if media_filter is not None:
            prepare_media(root, progress=False, media_filter=media_filter)
        return report.parts, list(zip(shards, report.shard_counts))


class DefaultGenericWebdatasetFactory(BaseWebdatasetFactory[T_sample], Generic[T_sample]):
    """Energon's generic factory: ``field_map`` / ``sample_loader`` / ``part_filter`` are what
    ``dataset.yaml`` gives (the loading reads them from there); kept as attributes."""

    def __init__(
        self,
        path: str | os.PathLike[str] | RemotePath,
        *,
        subflavors: dict[str, Any] | None = None,
        field_map: dict[str, str] | None = None,
        sample_loader: Any = None,
        part_filter: Any = None,
        **kwargs: Any,
    ) -> None:
        self.field_map = field_map
        self.sample_loader = sample_loader
        self.dataset_part_filter = part_filter
        super().__init__(path, subflavors=subflavors, **kwargs)


class DefaultDecoderWebdatasetFactory(DefaultGenericWebdatasetFactory[T_sample], Generic[T_sample]):
    """Energon's factory with a decoder. ``decoder`` (7.x) or the older keywords
    (``auto_decode``, ``image_decode`` ...); a subclass may set ``self._decoder`` to a
    webdataset-style callable (sample dict -> decoded dict), used for its dataset's parts.
    By default the task encoder's ``decoder`` decodes; ``decoder=None`` or
    ``auto_decode=False`` gives raw bytes."""

    _decoder: Any

    def __init__(
        self,
        path: str | os.PathLike[str] | RemotePath,
        *,
        decoder: Any = TASK_ENCODER_DECODER,
        auto_decode: bool = True,
        image_decode: str = "torchrgb",
        ignore_decoder_errors: bool = False,
        av_decode: str = "AVDecoder",
        video_decode_audio: bool = False,
        **kwargs: Any,
    ) -> None:
        self.image_decode = image_decode
        self.ignore_decoder_errors = ignore_decoder_errors
        self.av_decode = av_decode
        self.video_decode_audio = video_decode_audio
        self._decoder = decoder if auto_decode else None
        # Energon's older factories kept the video handler apart; the decoder decodes video
        self._video_decoder: Any = None
        super().__init__(path, **kwargs)


class StandardWebdatasetFactory(DefaultDecoderWebdatasetFactory[T_sample], Generic[T_sample]):
    """Samples of the type ``dataset.yaml`` names (Energon's ``sample_type=`` is read from
    there)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | RemotePath,
        *,
        sample_type: type[Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if sample_type is not None:
            self.__sample_type__ = sample_type  # type: ignore[misc]  # as Energon sets it
        super().__init__(path, **kwargs)


class _LegacyWebdataset(DefaultDecoderWebdatasetFactory):
    def __init__(self, path: str | os.PathLike[str], **kwargs: Any) -> None:
        name = self.__sample_type__.__name__ if self.__sample_type__ else "Sample"
        warnings.warn(
            f"{type(self).__name__} is Energon's deprecated class: set the sample type in "
            f"{path}/{META_DIR}/dataset.yaml instead (remove the top-level __module__ and "
            f"__class__; add sample_type: {{__module__: megatron.energon, __class__: {name}}})",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__(path, **kwargs)


def _legacy(name: str, sample_type: type[Sample]) -> type:
    return type(
        name, (_LegacyWebdataset,), {"__sample_type__": sample_type, "__module__": __name__}
    )


CaptioningWebdataset = _legacy("CaptioningWebdataset", CaptioningSample)
ImageWebdataset = _legacy("ImageWebdataset", ImageSample)
ImageClassificationWebdataset = _legacy("ImageClassificationWebdataset", ImageClassificationSample)
InterleavedWebdataset = _legacy("InterleavedWebdataset", InterleavedSample)
MultiChoiceVQAWebdataset = _legacy("MultiChoiceVQAWebdataset", MultiChoiceVQASample)
OCRWebdataset = _legacy("OCRWebdataset", OCRSample)
SimilarityInterleavedWebdataset = _legacy(
    "SimilarityInterleavedWebdataset", SimilarityInterleavedSample
)
TextWebdataset = _legacy("TextWebdataset", TextSample)
VidQAWebdataset = _legacy("VidQAWebdataset", VidQASample)
VQAWebdataset = _legacy("VQAWebdataset", VQASample)
VQAOCRWebdataset = _legacy("VQAOCRWebdataset", VQAOCRSample)
