"""``JsonlFileStore``: the lines of a prepared JSONL file read by name (``"<line>.json"``).

Defined beside the ``JsonlSource`` it reads through (:mod:`energon_lite.flavors.jsonl.source`);
this is its import path.
"""

from __future__ import annotations

from energon_lite.flavors.jsonl.source import JsonlFileStore

__all__ = ["JsonlFileStore"]
