"""Energon's module path ``megatron.energon.epathlib.epath``: ``EPath`` lives in
``energon_lite/storage/epath.py`` (the storage layer, so that every layer can name it)."""

from __future__ import annotations

from energon_lite.storage.epath import DEFAULT_PROFILE_NAME, EPath

__all__ = ["DEFAULT_PROFILE_NAME", "EPath"]
