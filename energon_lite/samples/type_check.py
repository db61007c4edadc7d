"""``get_train_dataset(..., sample_type=...)``: check the type a dataset's samples have.

Energon's ``sample_type`` argument only ensures typing: the loaded dataset's sample type
(``dataset.yaml``'s ``sample_type``, ``CrudeSample`` for a crude dataset, a join's joined
type) must be that class or a subclass of it, for every dataset of a metadataset. It does not
convert anything. A mismatch is a ConfigError naming the dataset and both types.
"""

from __future__ import annotations

import typing
from typing import Any

from energon_lite.errors import ConfigError
from energon_lite.samples.crude import CrudeSample
from energon_lite.samples.factory import SampleFactory


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def dataset_sample_type(factory: SampleFactory) -> type | None:
    """The class a dataset's samples have; None when it cannot be known before reading
    (a join made by a plain function without a return annotation)."""
    if factory.crude:
        return CrudeSample
    if factory.joined is not None:
        owner = getattr(factory.joiner, "__self__", None)  # a Sample class's from_joined
        if isinstance(owner, type):
            return owner
        try:
            hinted = typing.get_type_hints(factory.joiner).get("return")
        except Exception:  # unresolvable annotations: the type cannot be known
            return None
        return hinted if isinstance(hinted, type) else None
    return factory.sample_type


def check_sample_type(sample_type: Any, datasets: list[tuple[str, SampleFactory]]) -> None:
    """Refuse ``sample_type`` unless every ``(path, factory)`` makes instances of it."""
    if sample_type is None:
        return
    if not isinstance(sample_type, type):
        raise ConfigError(
            f"sample_type={sample_type!r} must be a class (such as CaptioningSample), "
            f"not a {type(sample_type).__name__}"
        )
    for path, factory in datasets:
        actual = dataset_sample_type(factory)
        if actual is not None and not issubclass(actual, sample_type):
            raise ConfigError(
                f"dataset {path}: its samples are {_qualname(actual)} (dataset.yaml), which is "
                f"not sample_type={_qualname(sample_type)} nor a subclass of it"
            )
