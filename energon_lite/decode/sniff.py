"""Content sniffing for ``SampleDecoder(guess_content=True)``: a file extension from the first
bytes of a part (images, video and audio containers), or None when nothing matches."""

from __future__ import annotations

# (offset, magic bytes, extension); the first match wins.
_MAGIC: tuple[tuple[int, bytes, str], ...] = (
    (0, b"\xff\xd8\xff", "jpg"),
    (0, b"\x89PNG\r\n\x1a\n", "png"),
    (0, b"GIF87a", "gif"),
    (0, b"GIF89a", "gif"),
    (0, b"BM", "bmp"),
    (0, b"II*\x00", "tif"),
    (0, b"MM\x00*", "tif"),
    (0, b"fLaC", "flac"),
    (0, b"OggS", "ogg"),
    (0, b"ID3", "mp3"),
    (0, b"\x1a\x45\xdf\xa3", "mkv"),
    (0, b"\x93NUMPY", "npy"),
)
_RIFF = {b"WEBP": "webp", b"WAVE": "wav", b"AVI ": "avi"}


def guess_extension(data: bytes) -> str | None:
    """The extension the content of ``data`` has, judged by its magic bytes."""
    head = bytes(data[:16])
    for offset, magic, ext in _MAGIC:
        if head[offset : offset + len(magic)] == magic:
            return ext
    if head[:4] == b"RIFF":
        return _RIFF.get(head[8:12])
    if head[4:8] == b"ftyp":
        return "m4a" if head[8:11] == b"M4A" else "mp4"
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0:
        return "mp3"  # MPEG audio frame sync without an ID3 tag
    return None
