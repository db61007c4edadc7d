"""``edataclass``: Energon's shorthand for ``@dataclass(kw_only=True, slots=True)``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from typing_extensions import dataclass_transform

C = TypeVar("C", bound=type)


@dataclass_transform(kw_only_default=True)
def edataclass(cls: C) -> C:
    """Make ``cls`` a dataclass with keyword-only fields stored in slots.

    Slots matter for subclasses: a field that a subclass re-declares without a default
    stays without a default (a plain dataclass would inherit the base's default).
    """
    return dataclass(kw_only=True, slots=True)(cls)  # type: ignore[return-value]
