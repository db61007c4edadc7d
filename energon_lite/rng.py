"""Derived randomness: every random decision is a pure function of (seed, keys..., counter).

No stage touches the global ``random``, ``numpy.random`` or ``torch`` generators. A stage
that needs a stream of random numbers holds a :class:`CounterRng`, whose only state is an
integer counter; restoring the counter restores the stream exactly. A weighted blend draws
from :class:`TorchStreamRng` instead, Energon's per-worker torch stream addressed by a counter,
so that it draws as Energon does. Draws are generated in
blocks so that a draw costs a list index, not a generator construction.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgpack
import numpy as np

_BLOCK = 1024


def derive_seed(seed: int, *keys: Any) -> int:
    """A 64-bit seed derived from ``seed`` and any msgpack-able keys (str, int, tuples...)."""
    payload = msgpack.packb([int(seed), *keys], use_bin_type=True)
    return int.from_bytes(hashlib.blake2b(payload, digest_size=8).digest(), "little")


def rng_for(seed: int, *keys: Any) -> np.random.Generator:
    """A fresh numpy Generator keyed by ``(seed, *keys)``; same keys, same stream."""
    return np.random.Generator(np.random.Philox(key=derive_seed(seed, *keys)))


def torch_generator_for(seed: int, *keys: Any):  # -> torch.Generator
    """A torch CPU Generator keyed by ``(seed, *keys)``."""
    import torch

    gen = torch.Generator()
    gen.manual_seed(derive_seed(seed, *keys) & 0x7FFF_FFFF_FFFF_FFFF)
    return gen


class CounterRng:
    """A stream of uniform floats in [0, 1) addressed by a counter.

    Draw ``n`` of the stream is the same whichever order or process asks for it, so the
    state of a stage that uses one is the integer :attr:`counter`.
    """

    __slots__ = ("_block", "_block_id", "_keys", "_seed", "counter")

    def __init__(self, seed: int, *keys: Any, counter: int = 0) -> None:
        self._seed = int(seed)
        self._keys = keys
        self._block_id = -1
        self._block: list[float] = []
        self.counter = int(counter)

    def random(self) -> float:
        """The next uniform float in [0, 1)."""
        block_id, offset = divmod(self.counter, _BLOCK)
        if block_id != self._block_id:
            self._block = rng_for(self._seed, *self._keys, block_id).random(_BLOCK).tolist()
            self._block_id = block_id
        self.counter += 1
        return self._block[offset]

    def integers(self, high: int) -> int:
        """The next integer uniformly in [0, high)."""
        if high <= 0:
            raise ValueError(f"CounterRng.integers needs high >= 1, got {high=}")
        return min(int(self.random() * high), high - 1)


def energon_worker_seed(global_worker_id: int, seed_offset: int) -> int:
    """Energon's ``WorkerConfig.worker_seed()``: 32 bits of the SHA-1 of
    ``"<global worker id>,<seed offset>"`` (with ``num_workers=0`` the worker id is the rank)."""
    digest = hashlib.sha1(f"{global_worker_id},{seed_offset}".encode()).digest()
    return int.from_bytes(digest, "big") & 0xFFFF_FFFF


class TorchStreamRng:
    """Energon's per-worker random stream (its ``WorkerRng``): the float32 draws of a torch CPU
    generator seeded with :func:`energon_worker_seed`, addressed by a counter as
    :class:`CounterRng` is. The state is still the counter: restoring draw ``n`` replays the
    ``n`` draws before it in blocks (tens of millions per second), never generator bytes.
    """

    __slots__ = ("_block", "_block_id", "_gen", "_seed", "counter")

    def __init__(self, seed: int, counter: int = 0) -> None:
        self._seed = int(seed)
        self._gen: Any = None  # positioned after block _block_id
        self._block_id = -1
        self._block: list[float] = []
        self.counter = int(counter)

    def random(self) -> float:
        """The next uniform float in [0, 1) (a float32 value)."""
        block_id, offset = divmod(self.counter, _TORCH_BLOCK)
        if block_id != self._block_id:
            self._move_to(block_id)
        self.counter += 1
        return self._block[offset]

    def _move_to(self, block_id: int) -> None:
        import torch

        if self._gen is None or block_id <= self._block_id:
            self._gen = torch.Generator()
            self._gen.manual_seed(self._seed)
            self._block_id = -1
        while self._block_id < block_id - 1:  # replay the draws before this block
            torch.rand(_TORCH_BLOCK, generator=self._gen)
            self._block_id += 1
        self._block = torch.rand(_TORCH_BLOCK, generator=self._gen).tolist()
        self._block_id = block_id


_TORCH_BLOCK = 1 << 14
_M64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """SplitMix64's finaliser: a fast, well-spread 64-bit bijection."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _M64
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _M64
    return x ^ (x >> 31)


def _mix64_array(x: np.ndarray) -> np.ndarray:
    """``_mix64`` over a uint64 array (numpy wraps uint64 products modulo 2**64)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def mix_draws(key: int, positions: np.ndarray) -> np.ndarray:
    """Independent-looking uint64 draws for integer ``positions`` under ``key``."""
    return _mix64_array(np.asarray(positions, dtype=np.uint64) ^ np.uint64(key))


class Permutation:
    """A pseudo-random bijection of ``range(n)`` keyed by ``(seed, *keys)``, in O(1) memory.

    A 4-round Feistel network over the smallest even power-of-two domain >= n, with cycle
    walking back into range. ``perm(i)`` costs a few integer operations, so a worker can
    walk a permutation of millions of slices without materialising it.
    """

    __slots__ = ("_half", "_mask", "_round_keys", "n")

    def __init__(self, n: int, seed: int, *keys: Any) -> None:
        if n < 0:
            raise ValueError(f"Permutation needs n >= 0, got {n=}")
        self.n = n
        self._half = max(1, ((max(n, 2) - 1).bit_length() + 1) // 2)
        self._mask = (1 << self._half) - 1
        self._round_keys = tuple(derive_seed(seed, *keys, "feistel", r) for r in range(4))

    def many(self, positions: np.ndarray) -> np.ndarray:
        """``perm(i)`` for every ``i`` in ``positions`` at once (the same values as calling it)."""
        positions = np.asarray(positions, dtype=np.int64)
        if positions.size and (positions.min() < 0 or positions.max() >= self.n):
            raise IndexError(f"permutation indices outside [0, {self.n})")
        out = np.empty(positions.shape, dtype=np.uint64)
        todo = np.arange(positions.size)
        current = positions.astype(np.uint64).ravel()
        flat = out.ravel()
        half, mask = np.uint64(self._half), np.uint64(self._mask)
        while todo.size:
            left, right = current >> half, current & mask
            for key in self._round_keys:
                left, right = right, left ^ (_mix64_array(right ^ np.uint64(key)) & mask)
            current = (left << half) | right
            done = current < np.uint64(self.n)
            flat[todo[done]] = current[done]
            todo, current = todo[~done], current[~done]
        return out.astype(np.int64)

    def inverse_many(self, values: np.ndarray) -> np.ndarray:
        """The positions ``i`` with ``perm(i) == v`` for every ``v`` in ``values`` (the Feistel
        rounds run backwards, with the same cycle walking)."""
        values = np.asarray(values, dtype=np.int64)
        if values.size and (values.min() < 0 or values.max() >= self.n):
            raise IndexError(f"permutation values outside [0, {self.n})")
        out = np.empty(values.shape, dtype=np.uint64)
        todo = np.arange(values.size)
        current = values.astype(np.uint64).ravel()
        flat = out.ravel()
        half, mask = np.uint64(self._half), np.uint64(self._mask)
        while todo.size:
            left, right = current >> half, current & mask
            for key in reversed(self._round_keys):
                left, right = right ^ (_mix64_array(left ^ np.uint64(key)) & mask), left
            current = (left << half) | right
            done = current < np.uint64(self.n)
            flat[todo[done]] = current[done]
            todo, current = todo[~done], current[~done]
        return out.astype(np.int64)

    def __call__(self, i: int) -> int:
        if not 0 <= i < self.n:
            raise IndexError(f"permutation index {i} outside [0, {self.n})")
        x = i
        while True:
            left, right = x >> self._half, x & self._mask
            for key in self._round_keys:
                left, right = right, left ^ (_mix64(right ^ key) & self._mask)
            x = (left << self._half) | right
            if x < self.n:
                return x
