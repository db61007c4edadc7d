"""``TextSample``, a built-in sample type (public home: :mod:`energon_lite.samples.types`)."""

from __future__ import annotations

from energon_lite.edataclass import edataclass
from energon_lite.samples.types import Sample


@edataclass
class TextSample(Sample):
    """A text."""

    __module__ = "energon_lite.samples.types"  # its public home (reprs, pickles)

    text: str
