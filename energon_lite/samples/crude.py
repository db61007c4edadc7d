"""Crude data (Energon's names): samples that stay dicts until the TaskEncoder cooks them.

* ``CrudeSample``: the dict a crude dataset yields (decoded parts plus ``__key__``,
  ``__restore_key__``, ``__subflavors__``, ``__sources__``). Its attributes ``aux_stores``
  (the leaf's ``aux:`` FileStores by name) and ``primary_store`` (its own dataset, read by
  file name) are what cookers receive as keyword arguments.
* ``CrudeWebdataset``: the ``dataset.yaml`` class of a crude tar dataset; opening one by
  this name gives the same split as ``PreparedDataset``.
* ``@cooker(need_primary=..., need_cache=...)``: marks a cook function that also wants the
  primary dataset (``primary``) or the loader's cache pool (``cache``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, overload

from energon_lite.shards.dataset import PreparedDataset

F = TypeVar("F", bound=Callable[..., Any])


class CrudeSample(dict):
    """A crude sample: a dict of parts and key fields, to be cooked."""

    aux_stores: dict[str, Any] | None = None
    primary_store: Any = None


class CrudeWebdataset(PreparedDataset):
    """A prepared tar dataset whose ``dataset.yaml`` says ``__class__: CrudeWebdataset``."""

    __sample_type__ = CrudeSample


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


def get_cooker_need_cache(fn: Callable[..., Any]) -> bool:
    return bool(getattr(fn, "__cooker_need_cache__", False))


def get_cooker_need_primary(fn: Callable[..., Any]) -> bool:
    return bool(getattr(fn, "__cooker_need_primary__", False))
