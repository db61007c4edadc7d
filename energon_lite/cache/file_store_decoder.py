"""Energon's ``FileStoreDecoder``: the interface ``DecodeFileStore`` decodes files with.

A decoder has ``decode(fname, data)``: ``fname`` is the file's name (its extension picks the
decoding), ``data`` its bytes. Subclass it for a decoder of your own; energon_lite's
``SampleDecoder`` counts as one (``isinstance(SampleDecoder(), FileStoreDecoder)``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from energon_lite.decode import SampleDecoder


class FileStoreDecoder(ABC):
    """Decodes one file read from a ``FileStore`` (Energon's abstract base, same method)."""

    @abstractmethod
    def decode(self, fname: str, data: bytes) -> Any:
        """The decoded content of file ``fname`` (e.g. ``path/key.ext``) with bytes ``data``."""


FileStoreDecoder.register(SampleDecoder)
