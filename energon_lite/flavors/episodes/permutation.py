"""A keyed pseudo-random permutation of ``[0, n)`` evaluated per position, in O(1) memory.

``full`` mode visits every (episode, start) once per epoch in a shuffled order. Holding
``np.random.permutation(n)`` would cost every worker 8 bytes per frame of the dataset and
a full shuffle per epoch; instead position ``i`` maps to ``perm(i)`` through a balanced
Feistel network over the smallest even power of two ``>= n`` (six rounds, splitmix64
round function, round keys derived from ``(seed, *keys)``), with cycle walking to stay
inside ``[0, n)``. A Feistel network is a bijection on its domain, and cycle walking keeps
it one on ``[0, n)``: every position maps to a distinct index. The domain is < 4n, so a
lookup takes fewer than four walks on average. State: none beyond the key.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from energon_lite.rng import derive_seed

_ROUNDS = 6
_M1, _M2, _M3 = (
    np.uint64(0x9E3779B97F4A7C15),
    np.uint64(0xBF58476D1CE4E5B9),
    np.uint64(0x94D049BB133111EB),
)


def _mix(x: np.ndarray, key: np.uint64) -> np.ndarray:
    z = (x + key) * _M1
    z = (z ^ (z >> np.uint64(30))) * _M2
    z = (z ^ (z >> np.uint64(27))) * _M3
    return z ^ (z >> np.uint64(31))


class KeyedPermutation:
    """``perm[i]`` for ``i`` in ``[0, n)``: a bijection of ``[0, n)`` keyed by ``(seed, *keys)``."""

    def __init__(self, n: int, seed: int, *keys: Any) -> None:
        if n < 1:
            raise ValueError(f"KeyedPermutation needs n >= 1, got {n=}")
        self.n = int(n)
        bits = max(2, (self.n - 1).bit_length())
        self._half = np.uint64((bits + 1) // 2)
        self._mask = np.uint64((1 << int(self._half)) - 1)
        self._keys = [np.uint64(derive_seed(seed, *keys, r)) for r in range(_ROUNDS)]

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self._half, x & self._mask
        for key in self._keys:
            left, right = right, left ^ (_mix(right, key) & self._mask)
        return (left << self._half) | right

    def __getitem__(self, positions: int | np.ndarray) -> np.ndarray:
        """The permuted index of each position (array in, array out; int in, 0-d array out)."""
        x = np.asarray(positions, dtype=np.uint64)
        if x.size and int(x.max()) >= self.n:
            raise IndexError(f"position {int(x.max())} outside [0, {self.n})")
        with np.errstate(over="ignore"):
            y = self._encrypt(x)
            out = y >= self.n
            while out.any():
                y[out] = self._encrypt(y[out])
                out = y >= self.n
        return y.astype(np.int64)
