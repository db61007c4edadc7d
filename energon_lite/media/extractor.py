"""Which files of a dataset are media, and their metadata (Energon's
``megatron.energon.media.extractor``).

A ``MediaFilterConfig`` names one strategy: ``EXTENSION`` (the file name's extension says
image or audio/video), ``GLOB`` (names matching one of the patterns, typed by their first bytes, else by
extension; Energon 7.4 stops there on an internal assertion) or
``HEADER`` (the first bytes of the content say it, the extension where they do not).
``extract_metadata`` then reads an ``ImageMetadata`` (PIL, header only) or an ``AVMetadata``
(PyAV) from bytes, an open binary file or a path; a file that is no media, or that cannot
be read as the media its name claims, gives None.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass, field
from enum import Enum
from fnmatch import fnmatch
from typing import Any

from energon_lite.media_records.records import ImageMetadata, MediaMetadataBase, MediaMetadataType

logger = logging.getLogger(__name__)

#: bytes, an open binary file, or a path object with ``.name`` and ``.open("rb")`` (``EPath``)
SourceData = Any

IMAGE_EXTENSIONS = frozenset(
    {"bmp", "gif", "ico", "j2k", "jp2", "jpx", "jpeg", "jpg", "png", "tif", "tiff", "webp"}
)
AV_EXTENSIONS = frozenset(
    {"aac", "avi", "flac", "m4a", "m4v", "mkv", "mov", "mp3", "mp4", "ogg", "wav", "webm"}
)
_HEADER_BYTES = 262  # enough for every signature below


class MediaFilterStrategy(str, Enum):
    """How media files are recognised."""

    EXTENSION = "EXTENSION"
    HEADER = "HEADER"
    GLOB = "GLOB"


@dataclass(frozen=True)
class MediaFilterConfig:
    """Which files count as media: a strategy, and the glob patterns of ``GLOB``."""

    strategy: MediaFilterStrategy
    patterns: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, glob: str | None, header: bool, extension: bool) -> MediaFilterConfig:
        """From the command line's three options, exactly one of them set (``glob`` may list
        several patterns separated by commas)."""
        if sum(bool(s) for s in (glob, header, extension)) != 1:
            raise ValueError(
                "Exactly one of GLOB, HEADER, or EXTENSION media filters must be enabled "
                f"(got glob={glob!r}, header={header}, extension={extension}). "
                "You can use multiple glob patterns by separating them by commas."
            )
        if glob:
            return cls(strategy=MediaFilterStrategy.GLOB, patterns=glob.split(","))
        if header:
            return cls(strategy=MediaFilterStrategy.HEADER)
        return cls(strategy=MediaFilterStrategy.EXTENSION)

    def should_consider_all(self) -> bool:
        """True when every file must be read to decide (``HEADER``)."""
        return self.strategy == MediaFilterStrategy.HEADER

    def should_consider_media(self, name: str) -> bool:
        """Whether ``name`` may be media, before its content is read (case-insensitive)."""
        lower = name.lower()
        if self.strategy == MediaFilterStrategy.HEADER:
            return True
        if self.strategy == MediaFilterStrategy.EXTENSION:
            return type_from_extension(lower) is not None
        return any(fnmatch(lower, pattern) for pattern in self.patterns)

    def extract_metadata(
        self, source: SourceData, filename: str | None = None
    ) -> MediaMetadataBase | None:
        """The metadata of ``source`` if this filter takes it for media, else None.

        ``filename`` is required for bytes and open files and refused for a path (its own
        name is used)."""
        if isinstance(source, (bytes, bytearray, io.IOBase)):
            if filename is None:
                raise ValueError("extract_metadata: bytes or a file object need filename=")
        elif filename is not None:
            raise ValueError(f"extract_metadata: filename={filename!r} given for path {source}")
        else:
            filename = source.name
        media_type = self._media_type(filename, source)
        if media_type is MediaMetadataType.IMAGE:
            return _image_metadata(source)
        if media_type is MediaMetadataType.AV:
            return _av_metadata(source)
        return None

    def _media_type(self, name: str, source: SourceData) -> MediaMetadataType | None:
        if self.strategy == MediaFilterStrategy.GLOB and not any(
            fnmatch(name, pattern) for pattern in self.patterns
        ):
            return None
        by_extension = type_from_extension(name)
        if self.strategy == MediaFilterStrategy.EXTENSION:
            return by_extension
        # HEADER, or a name the GLOB patterns call media: the content says which kind
        return type_from_header(_head(source)) or by_extension


def type_from_extension(name: str) -> MediaMetadataType | None:
    """Image or audio/video by the name's extension, None for anything else."""
    ext = name.rsplit(".", 1)[-1].lower() if "." in name.rsplit("/", 1)[-1] else ""
    if ext in IMAGE_EXTENSIONS:
        return MediaMetadataType.IMAGE
    if ext in AV_EXTENSIONS:
        return MediaMetadataType.AV
    return None


def type_from_header(head: bytes) -> MediaMetadataType | None:
    """Image or audio/video by the file's first bytes (the container signatures of the
    formats above), None when no signature matches."""
    image = (
        head.startswith((b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF87a", b"GIF89a", b"BM"))
        or head.startswith((b"II*\x00", b"MM\x00*", b"\x00\x00\x01\x00"))
        or head.startswith(b"\x00\x00\x00\x0cjP  \r\n\x87\n")  # JPEG 2000
        or head.startswith(b"\xff\x4f\xff\x51")  # JPEG 2000 codestream
        or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")
    )
    if image:
        return MediaMetadataType.IMAGE
    av = (
        head[4:8] == b"ftyp"  # mp4, mov, m4a, m4v
        or head.startswith((b"\x1a\x45\xdf\xa3", b"fLaC", b"OggS", b"ID3"))  # mkv/webm
        or (head[:4] == b"RIFF" and head[8:12] in (b"AVI ", b"WAVE"))
        or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xF6 in (0xF0, 0xF2))  # mp3, aac
    )
    return MediaMetadataType.AV if av else None


def _head(source: SourceData) -> bytes:
    if isinstance(source, (bytes, bytearray)):
        return bytes(source[:_HEADER_BYTES])
    if isinstance(source, io.IOBase):
        at = source.tell()
        head = source.read(_HEADER_BYTES)
        source.seek(at)
        return head
    with source.open("rb") as f:
        return f.read(_HEADER_BYTES)


def _image_metadata(source: SourceData) -> ImageMetadata | None:
    from PIL import Image, UnidentifiedImageError

    data = _read_all(source)
    try:
        with Image.open(io.BytesIO(data)) as image:
            return ImageMetadata(
                width=image.width,
                height=image.height,
                format=image.format or "UNKNOWN",
                mode=image.mode or "UNKNOWN",
            )
    except UnidentifiedImageError:
        logger.debug("not an image, though taken for one", exc_info=True)
        return None


def _av_metadata(source: SourceData) -> MediaMetadataBase | None:
    from energon_lite.av.decoder import AVDecoder

    data = _read_all(source)
    try:
        with AVDecoder(data) as decoder:
            return decoder.get_metadata(get_audio_num_samples=True)
    except Exception:  # a file that PyAV cannot open is no media, as in Energon
        logger.debug("no audio/video metadata", exc_info=True)
        return None


def _read_all(source: SourceData) -> bytes:
    if isinstance(source, (bytes, bytearray)):
        return bytes(source)
    if isinstance(source, io.IOBase):
        at = source.tell()
        data = source.read()
        source.seek(at)
        return data
    with source.open("rb") as f:
        return f.read()
