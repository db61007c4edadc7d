"""``TaskEncoder``: the user's hooks into the pipeline, in the order they run.

1. ``cook_crude_sample(sample)`` (crude datasets only; default: the first matching ``cookers`` entry)
2. ``encode_sample(sample) -> encoded`` *or* ``preencode_sample(sample)`` when packing
3. ``select_samples_to_pack(samples) -> list[list]`` (with ``packing_buffer_size``)
4. ``postencode_sample(sample)`` on each selected sample
5. ``pack_selected_samples(samples) -> packed`` per group
6. ``batch_group_criterion(sample) -> (bucket_key, batch_size)`` (grouped batching)
7. ``batch(samples) -> raw_batch``
8. ``encode_batch(raw_batch) -> batch``

A hook takes part only if the subclass overrides it. Any hook may raise ``SkipSample``.
Randomness: use ``self.sample_rng`` (a numpy Generator) or ``self.sample_torch_generator``
inside ``encode_sample``/``preencode_sample``/``postencode_sample``/cookers. They are seeded
from the loader seed and the sample's ``__restore_key__`` (which includes the epoch), so a
sample re-encoded after a restore gets the same random numbers, and no global RNG is touched.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from energon_lite.collate import default_collate
from energon_lite.decode import SampleDecoder
from energon_lite.errors import ConfigError
from energon_lite.rng import rng_for, torch_generator_for

T_sample = TypeVar("T_sample")
T_encoded_sample = TypeVar("T_encoded_sample")
T_raw_batch = TypeVar("T_raw_batch")
T_batch = TypeVar("T_batch")


@dataclass
class Cooker:
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


def stateless(fn: Callable | None = None, *, restore_seeds: bool = False) -> Callable:
    """Energon's marker for hooks without state. Accepted for drop-in compatibility.

    energon_lite never reseeds global RNGs (``restore_seeds=True`` is ignored with a
    warning): take randomness from ``self.sample_rng``, which is restored exactly.
    """

    def mark(f: Callable) -> Callable:
        if restore_seeds:
            warnings.warn(
                f"@stateless(restore_seeds=True) on {f.__qualname__}: energon_lite does not reseed "
                "global RNGs; use self.sample_rng for randomness that survives a restore",
                stacklevel=3,
            )
        f.__stateless__ = True  # type: ignore[attr-defined]
        return f

    return mark(fn) if fn is not None else mark


class TaskEncoder(Generic[T_sample, T_encoded_sample, T_raw_batch, T_batch]):
    """Subclass and override the hooks you need (see the module docstring for the order)."""

    decoder: SampleDecoder | None = SampleDecoder()
    cookers: Sequence[Cooker] = ()
    _cache_pool: Any = None  # set by get_loader(cache_pool=...)

    # 1
    def cook_crude_sample(self, sample: dict[str, Any]) -> T_sample:
        """Cook with the first matching cooker; it gets the leaf's aux FileStores by name
        (decoded with ``self.decoder``), plus ``primary=``/``cache=`` when it asks for them."""
        for cooker in self.cookers:
            if cooker.is_match(sample):
                return cooker.cook(sample, **self._cooker_arguments(cooker, sample))
        raise ConfigError(
            f"crude sample {sample.get('__key__')!r} with subflavors {sample.get('__subflavors__')!r}: "
            f"no cooker matches ({len(self.cookers)} cookers); add a Cooker for these subflavors "
            "or override cook_crude_sample"
        )

    def _cooker_arguments(self, cooker: Cooker, sample: Any) -> dict[str, Any]:
        from energon_lite.cache.file_store import DecodeFileStore, PrimaryFileStore

        def decoded(store: Any) -> Any:
            return store if self.decoder is None else DecodeFileStore(store, decoder=self.decoder)

        kwargs = {k: decoded(v) for k, v in (getattr(sample, "aux_stores", None) or {}).items()}
        if cooker.need_primary:
            primary = getattr(sample, "primary_store", None)
            if primary is None:
                raise ConfigError(
                    f"cooker {getattr(cooker.cook, '__name__', cooker.cook)!r} needs the primary "
                    f"dataset, but sample {sample.get('__key__')!r} has none"
                )
            kwargs["primary"] = PrimaryFileStore(decoded(primary), current_key=sample["__key__"])
        if cooker.need_cache:
            kwargs["cache"] = self.cache
        return kwargs

    @property
    def cache(self) -> Any:
        """The loader's cache pool (``get_loader(..., cache_pool=...)``); else a NoCachePool."""
        pool = getattr(self, "_cache_pool", None)
        if pool is None:
            from energon_lite.cache.no_cache import NoCachePool

            pool = self._cache_pool = NoCachePool()
        return pool

    # 2
    def encode_sample(self, sample: T_sample) -> T_encoded_sample:
        return sample  # type: ignore[return-value]

    def preencode_sample(self, sample: T_sample) -> Any:
        return sample

    # 3-5
    def select_samples_to_pack(self, samples: list[Any]) -> list[list[Any]]:
        raise NotImplementedError("override select_samples_to_pack to use packing_buffer_size")

    def postencode_sample(self, sample: Any) -> T_encoded_sample:
        return sample

    def pack_selected_samples(self, samples: list[Any]) -> T_encoded_sample:
        raise NotImplementedError("override pack_selected_samples to use packing_buffer_size")

    # 6
    def batch_group_criterion(self, sample: T_encoded_sample) -> tuple[Any, int]:
        raise NotImplementedError

    # 7
    def batch(self, samples: list[T_encoded_sample]) -> T_raw_batch:
        """Default: pad-and-stack tensors, list strings and everything else, keep key lists."""
        return default_collate(samples)

    # 8
    def encode_batch(self, batch: T_raw_batch) -> T_batch:
        return batch  # type: ignore[return-value]

    # randomness -------------------------------------------------------------------------

    _rng_seed: int = 0
    _rng_key: tuple | None = None
    _rng_cache: Any = None
    _torch_cache: Any = None

    def _set_sample_context(self, seed: int, restore_key: Any) -> None:
        self._rng_seed, self._rng_key = seed, restore_key
        self._rng_cache = self._torch_cache = None

    @property
    def sample_rng(self) -> np.random.Generator:
        """A numpy Generator seeded from (loader seed, current sample's restore key)."""
        if self._rng_cache is None:
            self._rng_cache = rng_for(self._rng_seed, "sample", self._rng_key)
        return self._rng_cache

    @property
    def sample_torch_generator(self) -> Any:
        """A torch Generator seeded like ``sample_rng``; pass it as ``generator=``."""
        if self._torch_cache is None:
            self._torch_cache = torch_generator_for(self._rng_seed, "sample", self._rng_key)
        return self._torch_cache

    # introspection ----------------------------------------------------------------------

    def overrides(self, hook: str) -> bool:
        """Whether the subclass overrides ``hook`` (only overridden hooks are wired in)."""
        base = getattr(TaskEncoder, hook)
        return getattr(type(self), hook) is not base


class DefaultTaskEncoder(TaskEncoder[T_sample, T_encoded_sample, T_raw_batch, T_batch]):
    """Batches samples with the default collation, optionally into given dataclass types."""

    def __init__(
        self,
        *,
        encoded_sample_type: type | None = None,
        raw_batch_type: type | None = None,
        batch_type: type | None = None,
    ) -> None:
        self.encoded_sample_type = encoded_sample_type
        self.raw_batch_type = raw_batch_type
        self.batch_type = batch_type

    def batch(self, samples: list[T_encoded_sample]) -> T_raw_batch:
        return default_collate(samples, self.raw_batch_type)
