"""``TransformMapper``: one geometric transform as a 3x3 matrix on pixel coordinates.

``apply_transform(matrix, dst_size)`` takes the matrix so far (source pixel -> current
pixel, x right and y down) and the current ``(height, width)``, and returns the matrix with
this transform applied after it, the new size and the parameters it drew. ``fill()`` and
``interpolation()`` say what the transform asks of the final resampling (None: no wish).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

Fill = int | float | tuple[int | float, ...] | list[int | float] | None


class TransformMapper(ABC):
    """Base of the mappers; ``transform`` is the wrapped transform object."""

    source_type: ClassVar[type]

    def __init__(self, transform: Any) -> None:
        self.transform = transform

    def __call__(self, sample: Any) -> Any:
        return self.transform(sample)

    @staticmethod
    def translate(x: float, y: float) -> np.ndarray:
        """Shift by (x, y) pixels."""
        m = np.eye(3, dtype=np.float64)
        m[:2, 2] = (x, y)
        return m

    @staticmethod
    def rotate(angle: float) -> np.ndarray:
        """Counter-clockwise by ``angle`` radians as seen on screen (y points down)."""
        c, s = np.cos(angle), np.sin(angle)
        m = np.eye(3, dtype=np.float64)
        m[:2, :2] = ((c, s), (-s, c))
        return m

    @staticmethod
    def scale(x: float, y: float) -> np.ndarray:
        """Stretch x by ``x`` and y by ``y``."""
        return np.diag((x, y, 1.0)).astype(np.float64)

    @staticmethod
    def shear(x: float, y: float) -> np.ndarray:
        """Shear: x += ``x`` * y, y += ``y`` * x."""
        m = np.eye(3, dtype=np.float64)
        m[0, 1], m[1, 0] = x, y
        return m

    @staticmethod
    def hflip() -> np.ndarray:
        """Mirror x (then translate by the width to stay in the image)."""
        return np.diag((-1.0, 1.0, 1.0))

    @staticmethod
    def vflip() -> np.ndarray:
        """Mirror y (then translate by the height)."""
        return np.diag((1.0, -1.0, 1.0))

    @abstractmethod
    def apply_transform(
        self, matrix: np.ndarray, dst_size: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, Any]:
        """(matrix with this transform after it, new (height, width), drawn parameters)."""

    def fill(self) -> Fill:
        """The fill value outside the source image this transform asks for."""
        return None

    def interpolation(self) -> Any:
        """The interpolation this transform asks for (a torchvision ``InterpolationMode``
        or its name), None for no preference."""
        return None
