"""Energon's argument forms of the entry points, mapped onto energon_lite's own.

``energon_lite.get_train_dataset``, ``get_val_dataset``, ``get_loader`` and
``get_savable_loader`` are :mod:`energon_lite.loader.api`'s functions (same signature and
documentation) that first take these forms out of their keyword arguments:

* a dataset's deprecated decoder arguments (``image_decode``, ``av_decode``,
  ``video_decode_audio``) become the task encoder's ``decoder`` with a ``FutureWarning``;
  ``auto_decode=False`` makes it None; ``handler`` and ``ignore_decoder_errors`` are
  ignored with a warning (bad samples are skipped up to ``failure_tolerance``);
  ``get_val_dataset`` ignores ``max_samples_per_sequence`` (validation reads contiguous
  ranges);
* a loader's ``worker_config`` must be the dataset's; ``fail_on_timeout=True`` makes the
  trainer raise after ``watchdog_timeout_seconds`` (``"restart"``: replace the stalled
  worker, :mod:`energon_lite.loader.healing`); the checkpoint and gc knobs have nothing
  to tune (the state is exact after every batch, workers hold no garbage to collect).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from energon_lite.decode import SampleDecoder
from energon_lite.errors import ConfigError
from energon_lite.loader import api
from energon_lite.loader.savable_dataset import SavableDataset
from energon_lite.loader.savable_loader import SavableLoader
from energon_lite.loader.watchdog_dataset import WatchdogDataset
from energon_lite.task_encoder.base import DefaultTaskEncoder, TaskEncoder

P = ParamSpec("P")
R = TypeVar("R")

_DECODER_KWARGS = ("image_decode", "av_decode", "video_decode_audio")
_MOOT_LOADER_OPTIONS = frozenset(
    {"checkpoint_every_sec", "checkpoint_every_min_n_samples", "n_checkpoints", "gc_collect_every_n_steps",
     "gc_freeze_at_step"}
)  # fmt: skip
# where a warning points: the caller of the public function (dataset_arguments <- accepting)
_CALLER = 3


def dataset_arguments(kwargs: dict[str, Any], validation: bool = False) -> None:
    """Take Energon's dataset argument forms out of ``kwargs`` (see the module docstring);
    sets ``kwargs["task_encoder"]`` when they change its decoder."""
    if validation:
        kwargs.pop("max_samples_per_sequence", None)
    given = {name: kwargs.pop(name) for name in _DECODER_KWARGS if name in kwargs}
    auto_decode = kwargs.pop("auto_decode", True)
    for name in ("handler", "ignore_decoder_errors"):
        if name in kwargs:
            kwargs.pop(name)
            warnings.warn(
                f"get_train_dataset({name}=...) is Energon's deprecated argument and is ignored: "
                "bad samples are skipped and logged up to failure_tolerance",
                FutureWarning,
                stacklevel=_CALLER,
            )
    if auto_decode and not given:
        return
    task_encoder = kwargs.get("task_encoder")
    if task_encoder is None:
        task_encoder = kwargs["task_encoder"] = DefaultTaskEncoder()
    if not auto_decode:
        task_encoder.decoder = None
        return
    warnings.warn(
        f"get_train_dataset({', '.join(given)}) is Energon's deprecated form; set "
        f"`decoder = SampleDecoder({', '.join(f'{k}={v!r}' for k, v in given.items())})` "
        "on your TaskEncoder instead",
        FutureWarning,
        stacklevel=_CALLER,
    )
    decoder = SampleDecoder(**given)
    current = task_encoder.decoder
    if current is not None and current != TaskEncoder.decoder and current != decoder:
        raise ConfigError(
            f"{type(task_encoder).__name__} already has decoder {current}; the "
            f"arguments {given} ask for another one"
        )
    task_encoder.decoder = decoder


def loader_options(dataset: SavableDataset, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` without Energon's loader argument forms (see the module docstring)."""
    worker_config = options.pop("worker_config", None)
    if worker_config is not None and worker_config != dataset.worker_config:
        raise ConfigError(
            f"get_loader(worker_config={worker_config}) differs from the dataset's "
            f"{dataset.worker_config}; pass the same one (or none)"
        )
    fail_on_timeout = options.pop("fail_on_timeout", False)
    if fail_on_timeout not in (True, False, "restart"):
        raise ConfigError(
            f"fail_on_timeout={fail_on_timeout!r}: use True (raise), 'restart' (replace the "
            "stalled worker) or False"
        )
    if fail_on_timeout:  # the watchdog raises, or restarts the worker: a batch timeout
        options.setdefault("timeout_seconds", options.get("watchdog_timeout_seconds", 60.0))
    if fail_on_timeout == "restart":
        options.setdefault("on_timeout", "restart")
    for name in _MOOT_LOADER_OPTIONS & set(options):
        options.pop(name)
    return options


def _taking_dataset_forms(core: Callable[P, R], validation: bool = False) -> Callable[P, R]:
    @functools.wraps(core)
    def accepting(*args: P.args, **kwargs: P.kwargs) -> R:
        dataset_arguments(kwargs, validation)
        return core(*args, **kwargs)

    return accepting


get_train_dataset = _taking_dataset_forms(api.get_train_dataset)
get_val_dataset = _taking_dataset_forms(api.get_val_dataset, validation=True)


def watched(dataset: SavableDataset, options: dict[str, Any]) -> SavableDataset:
    """``dataset`` in a ``WatchdogDataset`` when ``watchdog_timeout_seconds`` is given, as
    Energon's loaders wrap it (its ``_watchdog_trigger`` then runs on a stall)."""
    timeout = options.get("watchdog_timeout_seconds")
    if timeout is None or isinstance(dataset, WatchdogDataset):
        return dataset
    return WatchdogDataset(
        dataset,
        dataset.worker_config,
        timeout_seconds=timeout,
        initial_timeout_seconds=options.get("watchdog_initial_timeout_seconds"),
        fail_on_timeout=bool(options.get("fail_on_timeout", False)),
    )


@functools.wraps(api.get_savable_loader)
def get_savable_loader(dataset: SavableDataset, **options: Any) -> SavableLoader:
    dataset = watched(dataset, options)
    return api.get_savable_loader(dataset, **loader_options(dataset, options))


@functools.wraps(api.get_loader)
def get_loader(dataset: SavableDataset, **options: Any) -> SavableLoader:
    dataset = watched(dataset, options)
    return api.get_loader(dataset, **loader_options(dataset, options))
