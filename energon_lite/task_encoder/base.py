"""``TaskEncoder``: the user's hooks into the pipeline, in the order they run.

1. ``cook_crude_sample(sample)`` (crude datasets only; default: the first matching ``cookers`` entry)
2. ``encode_sample(sample) -> encoded`` *or* ``preencode_sample(sample)`` when packing;
   then ``sample_cost(encoded) -> float`` for a blend weighted by ``tokens``
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

import dataclasses
import functools
import random
import types
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np
import torch

from energon_lite.decode import SampleDecoder
from energon_lite.errors import ConfigError
from energon_lite.rng import derive_seed, rng_for, torch_generator_for
from energon_lite.samples.types import Batch  # noqa: F401  (Energon's module path re-export)
from energon_lite.state.restore_key import without_index
from energon_lite.task_encoder.chain_context import running_context
from energon_lite.task_encoder.cooking import Cooker
from energon_lite.task_encoder.hook_index import SEEDS_BY_KEY, HookIndex

if TYPE_CHECKING:  # Energon's module path re-exports these; at run time see __getattr__
    from energon_lite.batching.collate import (  # noqa: F401
        batch_list,
        batch_pad_stack,
        batch_stack,
        default_collate,
        generic_batch,
    )

# the collate functions, imported where a batch is first made (in the workers when there
# are any), not where a task encoder is built; still importable from this module
_COLLATE = frozenset(
    ("batch_list", "batch_pad_stack", "batch_stack", "default_collate", "generic_batch")
)


def __getattr__(name: str) -> Any:
    if name in _COLLATE:
        from energon_lite.batching import collate

        return getattr(collate, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


T_sample = TypeVar("T_sample")
T_encoded_sample = TypeVar("T_encoded_sample")
T_raw_batch = TypeVar("T_raw_batch")
T_batch = TypeVar("T_batch")


def stateless(
    fn: Callable | None = None, *, restore_seeds: bool = False, failure_tolerance: int | None = None
) -> Callable:
    """Energon's marker for hooks without state.

    ``failure_tolerance`` (Energon's): the n-th consecutive failure of this hook stops the
    run (the ones before are logged and skipped); 0 never stops it; ``None`` keeps the
    loader's ``failure_tolerance``.

    ``restore_seeds=True`` (Energon's option, for encoders that call ``random``,
    ``numpy.random`` or ``torch``'s global generators): around each call, the three global
    generators are seeded as Energon seeds them, from the worker's seed and
    ``current_sample_index``, and put back afterwards; the index is replayed when an item is
    made again, so the hook gives the same result after a restore. (A run whose state says
    ``seeds`` 1, the earlier form, seeds from (loader seed, the item's restore key), as it
    did: ``energon_lite/task_encoder/hook_index.py``.) Prefer ``self.sample_rng``: it needs
    no global state at all.
    """

    if failure_tolerance is not None and (
        not isinstance(failure_tolerance, int) or failure_tolerance < 0
    ):
        raise ConfigError(f"stateless({failure_tolerance=}) must be an int >= 0 or None")

    def mark(f: Callable) -> Callable:
        if restore_seeds:
            f = _with_restored_seeds(f)
        f.__stateless__ = True  # type: ignore[attr-defined]
        if failure_tolerance is not None:
            f.__failure_tolerance__ = failure_tolerance  # type: ignore[attr-defined]
        return f

    return mark(fn) if fn is not None else mark


def get_stateless(fn: Callable) -> bool:
    """Whether ``fn`` was marked with :func:`stateless` (Energon's helper)."""
    return bool(getattr(fn, "__stateless__", False))


def _with_restored_seeds(f: Callable) -> Callable:
    @functools.wraps(f)
    def seeded(self: TaskEncoder, *args: Any, **kwargs: Any) -> Any:
        item = args[0] if args else None
        key = getattr(item, "__restore_key__", None)
        if key is None and isinstance(item, dict):
            key = item.get("__restore_key__")
        if key is None:
            key = self._rng_key
        index = _running_index()
        if index is None or index.seeds == SEEDS_BY_KEY or index.sample is None:  # no loader
            seed = derive_seed(self._rng_seed, "restore_seeds", f.__qualname__, key)
        else:  # Energon's: the worker's seed and the hook's call index
            seed = index.energon_seed(self.current_sample_index)
        saved = _global_rng_state()
        random.seed(seed)
        np.random.seed(seed & 0xFFFF_FFFF)
        torch.manual_seed(seed & 0x7FFF_FFFF_FFFF_FFFF)
        try:
            out = f(self, *args, **kwargs)
            if isinstance(out, types.GeneratorType):  # its body runs later, one output at a time
                return _seeded_outputs(out, _global_rng_state())
            return out
        finally:
            _set_global_rng_state(saved)

    return seeded


def _running_index() -> HookIndex | None:
    """The indices of the chain whose hooks run now (None outside every chain)."""
    context = running_context()
    return None if context is None else context.index


def _global_rng_state() -> tuple[Any, Any, Any]:
    return random.getstate(), np.random.get_state(), torch.random.get_rng_state()


def _set_global_rng_state(state: tuple[Any, Any, Any]) -> None:
    random.setstate(state[0])
    np.random.set_state(state[1])
    torch.random.set_rng_state(state[2])


def _seeded_outputs(outputs: Iterator[Any], inner: tuple[Any, Any, Any]) -> Iterator[Any]:
    """A generator hook's outputs, each made with the generators seeded for its input and
    carried on from the previous output (so output ``n`` is the same after a restore), the
    caller's generators untouched in between."""
    while True:
        outer = _global_rng_state()
        _set_global_rng_state(inner)
        try:
            item = next(outputs)
        except StopIteration:
            return
        finally:
            inner = _global_rng_state()
            _set_global_rng_state(outer)
        yield item


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

    def sample_cost(self, sample: Any) -> float:
        """What a sample costs for a blend with ``weight_unit: tokens`` (runs after
        ``encode_sample`` / ``preencode_sample``). Default: its length in tokens, the length
        a packer packs: ``len()`` of its ``tokens``, ``input_ids`` or ``text`` field (the
        first it has). Override for another measure (pixels, seconds of audio ...)."""
        for name in ("tokens", "input_ids", "text"):
            value = sample.get(name) if isinstance(sample, dict) else getattr(sample, name, None)
            if value is not None and hasattr(value, "__len__"):
                return float(len(value))
        raise ConfigError(
            f"{type(self).__name__}.sample_cost: a {type(sample).__name__} has no tokens, "
            "input_ids or text field to measure; override sample_cost(sample) -> float for "
            "weight_unit: tokens"
        )

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
        from energon_lite.batching.collate import default_collate

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
        self._rng_seed, self._rng_key = seed, without_index(restore_key)
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

    # Energon's indices (the running chain's: energon_lite/task_encoder/chain_context.py) -------

    @property
    def current_batch_index(self) -> int:
        """The index of the batch being made by this rank (unique and increasing per rank, in
        the order the loader hands batches out); restored exactly with the loader state."""
        index = _running_index() or HookIndex()
        return index.spread(index.batch, "current_batch_index")

    @property
    def current_sample_index(self) -> int:
        """How many times the running hook (``encode_sample``, ``batch``, ``encode_batch``)
        was called before on this rank's worker, spread over the workers (unique per rank)."""
        index = _running_index() or HookIndex()
        return index.spread(index.sample, "current_sample_index")

    # introspection ----------------------------------------------------------------------

    def overrides(self, hook: str) -> bool:
        """Whether the subclass overrides ``hook`` (only overridden hooks are wired in)."""
        base = getattr(TaskEncoder, hook)
        return getattr(type(self), hook) is not base


class DefaultTaskEncoder(TaskEncoder[T_sample, T_encoded_sample, T_raw_batch, T_batch]):
    """Batches samples with the default collation; converts samples to
    ``encoded_sample_type``, batches to ``raw_batch_type`` and encoded batches to
    ``batch_type`` when they are given (a dataclass, a NamedTuple or ``dict``; fields are
    matched by name), as Energon's does."""

    def __init__(
        self,
        *,
        encoded_sample_type: type | None = None,
        raw_batch_type: type | None = None,
        batch_type: type | None = None,
    ) -> None:
        for name, target in (
            ("encoded_sample_type", encoded_sample_type),
            ("raw_batch_type", raw_batch_type),
            ("batch_type", batch_type),
        ):
            if target is not None and not _is_target_type(target):
                raise ConfigError(
                    f"DefaultTaskEncoder({name}={target!r}): need a dataclass, a NamedTuple or dict"
                )
        self.encoded_sample_type = encoded_sample_type
        self.raw_batch_type = raw_batch_type
        self.batch_type = batch_type

    def overrides(self, hook: str) -> bool:
        """The conversions run only when a target type is set (or a subclass overrides them)."""
        own = getattr(type(self), hook, None)
        if hook == "encode_sample" and own is DefaultTaskEncoder.encode_sample:
            return getattr(self, "encoded_sample_type", None) is not None
        if hook == "encode_batch" and own is DefaultTaskEncoder.encode_batch:
            target = getattr(self, "batch_type", None)
            return target is not None and target is not getattr(self, "raw_batch_type", None)
        return super().overrides(hook)

    @stateless
    def encode_sample(self, sample: T_sample) -> T_encoded_sample:
        return convert_fields(sample, getattr(self, "encoded_sample_type", None))

    @stateless
    def encode_batch(self, batch: T_raw_batch) -> T_batch:
        return convert_fields(batch, getattr(self, "batch_type", None))

    @stateless
    def batch(self, samples: list[T_encoded_sample]) -> T_raw_batch:
        from energon_lite.batching.collate import default_collate

        return default_collate(samples, self.raw_batch_type)


def _is_target_type(target: Any) -> bool:
    return isinstance(target, type) and (
        issubclass(target, dict)
        or dataclasses.is_dataclass(target)
        or (issubclass(target, tuple) and hasattr(target, "_fields"))
    )


def convert_fields(value: Any, target: type | None) -> Any:
    """``value`` (a dataclass, NamedTuple or dict) as ``target``, its fields matched by name;
    unchanged when ``target`` is None or ``value`` already is one."""
    if target is None or isinstance(value, target):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    elif isinstance(value, tuple) and hasattr(value, "_fields"):
        fields = dict(zip(value._fields, value))
    elif isinstance(value, dict):
        fields = dict(value)
    else:
        raise ConfigError(
            f"cannot convert a {type(value).__name__} to {target.__name__}: only dataclasses, "
            "NamedTuples and dicts have fields to match by name"
        )
    if issubclass(target, dict):
        return fields
    wanted = (
        {f.name for f in dataclasses.fields(target)}
        if dataclasses.is_dataclass(target)
        else set(getattr(target, "_fields", ()))
    )
    extra = sorted(set(fields) - wanted)
    if extra:  # Energon passes every field: an unknown one is an error, not dropped
        raise ConfigError(
            f"cannot convert a {type(value).__name__} to {target.__name__}: it has no fields "
            f"{extra}; add them to {target.__name__} (fields are matched by name)"
        )
    try:
        return target(**fields)
    except TypeError as exc:
        raise ConfigError(
            f"cannot convert a {type(value).__name__} to {target.__name__} (fields matched by "
            f"name; missing {sorted(wanted - set(fields))}): {exc}"
        ) from None


# ``from energon_lite.task_encoder.base import *`` gives every public name, the lazily
# imported collate functions included (a star import reads them through ``__getattr__``)
__all__ = sorted({name for name in globals() if not name.startswith("_")} | _COLLATE)
