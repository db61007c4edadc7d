"""``MultiChoiceVQASample``, a built-in sample type (public home: :mod:`energon_lite.samples.types`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from energon_lite.edataclass import edataclass
from energon_lite.samples.types import Sample

if TYPE_CHECKING:
    import torch


@edataclass
class MultiChoiceVQASample(Sample):
    """An image, a question and the choices, with the index of the right one."""

    __module__ = "energon_lite.samples.types"  # its public home (reprs, pickles)

    image: torch.Tensor | Any
    context: str
    choices: list[str] | None = None
    correct_choice_idx: int = 0
