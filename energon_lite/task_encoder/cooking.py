"""Cooking crude samples (Energon's ``task_encoder.cooking``): ``Cooker`` and ``@cooker``.

A ``Cooker`` turns a crude sample (a dict of decoded parts, see
:mod:`energon_lite.samples.crude`) into a typed sample; ``TaskEncoder.cook_crude_sample``
runs the first one that matches. ``@cooker(need_primary=..., need_cache=...)`` marks a cook
function that also wants the primary dataset (``primary=``) or the loader's cache pool
(``cache=``); ``Cooker.need_primary`` / ``Cooker.need_cache`` read the marks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

F = TypeVar("F", bound=Callable[..., Any])


T_sample = TypeVar("T_sample", covariant=True)


@overload
def cooker(fn: F) -> F: ...


@overload
def cooker(*, need_cache: bool = False, need_primary: bool = False) -> Callable[[F], F]: ...


def cooker(
    fn: Callable[..., Any] | None = None, *, need_cache: bool = False, need_primary: bool = False
) -> Any:
    """Mark a cook function; ``need_primary`` adds ``primary=`` (the sample's own dataset,
    where ``".jpg"`` names a part of the current sample), ``need_cache`` adds ``cache=``."""
    if fn is None:
        return functools.partial(cooker, need_cache=need_cache, need_primary=need_primary)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    wrapper.__cooker_need_cache__ = need_cache  # type: ignore[attr-defined]
    wrapper.__cooker_need_primary__ = need_primary  # type: ignore[attr-defined]
    return wrapper


@dataclass
class Cooker(Generic[T_sample]):
    """Turns a crude sample (dict of decoded parts) into a typed sample.

    Used when ``has_subflavors`` items all equal the sample's subflavors and
    ``condition(sample)`` (if given) is true.
    """

    cook: Callable[..., Any]
    has_subflavors: dict[str, Any] | None = None
    condition: Callable[[dict[str, Any]], bool] | None = None

    @property
    def need_primary(self) -> bool:
        """The cook function wants ``primary=`` (marked with ``@cooker(need_primary=True)``)."""
        return bool(getattr(self.cook, "__cooker_need_primary__", False))

    @property
    def need_cache(self) -> bool:
        """The cook function wants ``cache=`` (marked with ``@cooker(need_cache=True)``)."""
        return bool(getattr(self.cook, "__cooker_need_cache__", False))

    def is_match(self, crude: dict[str, Any]) -> bool:
        """Whether this cooker takes ``crude`` (a crude sample, or Energon-style its subflavors)."""
        if "__key__" not in crude:  # Energon's call: is_match(subflavors)
            crude = {"__subflavors__": crude}
        subflavors = crude.get("__subflavors__") or {}
        if self.has_subflavors and any(
            subflavors.get(k, _MISSING) != v for k, v in self.has_subflavors.items()
        ):
            return False
        return self.condition is None or bool(self.condition(crude))


_MISSING = object()
