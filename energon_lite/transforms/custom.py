"""``CustomTransform``: a transform of your own inside a ``MergeTransform``. Subclass it and
write ``apply_transform`` (see ``TransformMapper``); it is merged as it is."""

from __future__ import annotations

from typing import Any

from energon_lite.transforms.base import TransformMapper


class CustomTransform(TransformMapper):
    """Base of user transforms: override ``apply_transform`` (and ``fill`` /
    ``interpolation`` when it has a wish). Called alone, it resamples the image by itself."""

    def __call__(self, sample: Any) -> Any:
        from energon_lite.transforms.merge import MergeTransform

        return MergeTransform([self])(sample)
