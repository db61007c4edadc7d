"""``InterleavedSample``, a built-in sample type (public home: :mod:`energon_lite.samples.types`)."""

from __future__ import annotations

from typing import Any

from energon_lite.edataclass import edataclass
from energon_lite.samples.types import Sample


@edataclass
class InterleavedSample(Sample):
    """Images and texts in one sequence, in their order."""

    __module__ = "energon_lite.samples.types"  # its public home (reprs, pickles)

    sequence: list[Any]
