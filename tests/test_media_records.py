"""``energon_lite.media_records``: the media metadata types and their recorded table need no
PyAV (an image-only setup reads them); only reading a video's metadata does. The stored form
is Energon's (``megatron.energon.media.metadata`` is the oracle)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from energon_lite.media import AVMetadata, ImageMetadata, deserialize_media_metadata
from energon_lite.media import serialize_media_metadata as serialize


def test_media_metadata_reads_without_pyav() -> None:
    code = (
        "import sys; sys.modules['av'] = None\n"
        "from energon_lite.media import ImageMetadata\n"
        "from energon_lite.media.extractor import MediaFilterConfig, MediaFilterStrategy\n"
        "import energon_lite.cache.media_metadata\n"
        "config = MediaFilterConfig(strategy=MediaFilterStrategy.EXTENSION)\n"
        "try:\n"
        "    config.extract_metadata(b'00', filename='clip.mp4')\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc.name)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("MissingExtraError av"), done.stdout


def test_records_serialise_as_energons() -> None:
    theirs = pytest.importorskip("megatron.energon.media.metadata")
    records = [
        ImageMetadata(width=3, height=2, format="PNG", mode="RGB"),
        AVMetadata(video_fps=25.0, video_width=8, audio_sample_rate=None),
    ]
    for ours in records:
        kind, payload = serialize(ours)
        twin = getattr(theirs, type(ours).__name__)(**ours.to_dict())
        their_kind, their_payload = theirs.serialize_media_metadata(twin)
        assert (kind.value, payload) == (their_kind.value, their_payload)
        assert deserialize_media_metadata(kind.value, payload) == ours
