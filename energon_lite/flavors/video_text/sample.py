"""``VideoTextSample`` (one CSV row) and the lazy readers of its media and feature files.

The sample holds only the row: opening the video is deferred to :meth:`read_frames`, which
decodes just the requested frame indices with the seek-based ``AVDecoder``. Given a
``energon_lite.av.DecoderCache`` (the task encoder keeps one per worker), a local video stays
open for the next sample of the same file, whose clip then skips the open and may continue
where the last one stopped. An image path
(jpg, png, ...) is a one-frame video. Every failure raises ``MediaDecodeError`` naming the
sample key and the path, which the loader's skip-and-log policy reports.

A path that is a URL (a table in object storage) is opened with :func:`open_media`: a
seekable file over ranged GETs (``storage.RangedFile``: retries, each GET pinned to the
object's version, and the node's shard cache when one is on), so a video decodes from the
ranges its frames need. A store that fails for good (``RemoteStorageError``) or a media
object replaced while it is read (``ObjectChangedError``) is not a bad sample: it propagates
and stops the run.
"""

from __future__ import annotations

import errno
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import torch

from energon_lite.errors import DatasetFormatError, MediaDecodeError, RemoteStorageError
from energon_lite.samples.types import Sample
from energon_lite.storage import is_url, open_binary
from energon_lite.storage.ops import ObjectChangedError
from energon_lite.storage.path import as_path

if TYPE_CHECKING:
    from energon_lite.av.decoder_cache import DecoderCache

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff"})


@dataclass
class VideoTextSample(Sample):
    """One row of a video-text CSV; ``path`` and ``*_path`` extras are absolute."""

    path: str = ""
    text: str = ""
    num_frames: int = 1
    height: int = 0
    width: int = 0
    fps: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def is_image(self) -> bool:
        return Path(self.path).suffix.lower() in IMAGE_SUFFIXES

    def read_frames(self, indices: list[int], decoders: DecoderCache | None = None) -> torch.Tensor:
        """The frames at ``indices`` (sorted, repeats allowed) as uint8 ``(T, 3, H, W)``.

        ``decoders``: where a local video is kept open for the next sample of the same file
        (None: opened and closed here)."""
        if self.is_image:
            return self._read_image().expand(len(indices), -1, -1, -1)
        import av

        from energon_lite.av import AVDecoder

        wanted = sorted(set(indices))
        decoded: dict[int, torch.Tensor] = {}
        # Consecutive indices form one range; gaps are separate ranges, so the decoder
        # seeks over a gap that spans a keyframe instead of decoding it.
        ranges = _runs(wanted)
        try:
            if decoders is None or is_url(self.path):
                with open_media(self.path) as media, AVDecoder(media) as decoder:
                    data = decoder.get_clips(video_clip_ranges=ranges, video_unit="frames")
            else:
                try:  # the file stays open for the next sample of the same video
                    decoder = decoders.decoder(self.path)
                    data = decoder.get_clips(video_clip_ranges=ranges, video_unit="frames")
                except BaseException:
                    decoders.discard(self.path)
                    raise
        except MediaDecodeError as exc:
            raise MediaDecodeError(
                f"sample {self.__key__!r} ({self.path}, CSV num_frames={self.num_frames}): {exc}"
            ) from exc
        except (RemoteStorageError, ObjectChangedError):
            raise  # the store failed, not this sample
        except (OSError, ValueError, av.FFmpegError) as exc:
            raise MediaDecodeError(
                f"sample {self.__key__!r}: cannot decode {self.path}: {exc}"
            ) from exc
        if len(data.video_clips) != len(ranges):  # ranges past the end give no clip
            raise MediaDecodeError(
                f"sample {self.__key__!r} ({self.path}): frames up to {ranges[-1][1]} asked, "
                f"the video ends before; the CSV says num_frames={self.num_frames}"
            )
        for (start, end), clip in zip(ranges, data.video_clips):
            if len(clip) != end - start + 1:
                raise MediaDecodeError(
                    f"sample {self.__key__!r} ({self.path}): frames {start}..{end} asked, "
                    f"{len(clip)} decoded; the CSV says num_frames={self.num_frames}"
                )
            decoded.update(zip(range(start, end + 1), clip))
        return torch.stack([decoded[i] for i in indices])

    def _read_image(self) -> torch.Tensor:
        from PIL import Image, UnidentifiedImageError

        from energon_lite.decode.image import MAX_IMAGE_PIXELS

        try:
            with open_media(self.path) as media, Image.open(media) as image:
                if image.width * image.height > MAX_IMAGE_PIXELS:  # from the header
                    raise MediaDecodeError(
                        f"sample {self.__key__!r}: image {self.path} is {image.width}x"
                        f"{image.height}, over the per-image budget of {MAX_IMAGE_PIXELS:,} "
                        "pixels; not decoded"
                    )
                array = np.asarray(image.convert("RGB"))
        except (RemoteStorageError, ObjectChangedError):
            raise
        except (OSError, UnidentifiedImageError) as exc:
            raise MediaDecodeError(
                f"sample {self.__key__!r}: cannot read image {self.path}: {exc}"
            ) from exc
        return torch.from_numpy(array.copy()).permute(2, 0, 1).unsqueeze(0)

    def load_feature(self, column: str) -> torch.Tensor:
        """The tensor in the file named by extra column ``column`` (``.pt`` or ``.npy``)."""
        path = self.extra.get(column)
        if not path:
            raise MediaDecodeError(f"sample {self.__key__!r}: column {column!r} is empty or absent")
        try:
            with open_media(path) as file:
                if path.endswith(".npy"):
                    return torch.from_numpy(np.load(file, allow_pickle=False))
                value = torch.load(file, map_location="cpu", weights_only=True)
        except (RemoteStorageError, ObjectChangedError):
            raise
        except (OSError, ValueError, RuntimeError) as exc:
            raise MediaDecodeError(
                f"sample {self.__key__!r}: cannot load {column}={path}: {exc}"
            ) from exc
        if not isinstance(value, torch.Tensor):
            raise MediaDecodeError(
                f"sample {self.__key__!r}: {path} holds a {type(value).__name__}, not a tensor"
            )
        return value


def open_media(path: str) -> BinaryIO:
    """A seekable binary file for a media path: a local file, or (a URL) ranged GETs through
    the storage layer. A missing file raises ``FileNotFoundError`` naming it, which the callers
    turn into ``MediaDecodeError`` (the sample is skipped and logged)."""
    if not is_url(path):
        return open(path, "rb")
    try:
        return open_binary(as_path(path))
    except ObjectChangedError:
        raise
    except DatasetFormatError as exc:  # not found: as a missing local file
        raise FileNotFoundError(errno.ENOENT, str(exc), path) from None


def _runs(indices: list[int]) -> list[tuple[int, int]]:
    """Sorted distinct ints -> inclusive ``(first, last)`` runs of consecutive values."""
    runs = []
    for _, group in itertools.groupby(enumerate(indices), key=lambda p: p[1] - p[0]):
        values = [v for _, v in group]
        runs.append((values[0], values[-1]))
    return runs
