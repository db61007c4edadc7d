"""Where a prepared episode folder keeps its index (no heavy imports: the kind registry
reads it to recognise a folder in every loop that opens data)."""

from __future__ import annotations

INDEX_PATH = ".nv-meta/episodes.npz"
