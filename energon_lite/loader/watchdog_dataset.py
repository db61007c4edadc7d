"""``WatchdogDataset`` (Energon's ``megatron.energon.wrappers.watchdog_dataset``): a dataset
whose loading is watched. When a batch takes longer than ``timeout_seconds`` (the first
``initial_timeout_seconds``), the loader's watchdog logs where it is stuck and calls
``_watchdog_trigger``: a ``RuntimeWarning``, or with ``fail_on_timeout=True`` a
``TimeoutError`` that is logged (the trainer raises through the loader's batch timeout, see
``get_loader(fail_on_timeout=True)``).

It changes nothing in the stream: the wrapped dataset's pipeline, length, fingerprint and
saved states are the same. ``get_loader(..., watchdog_timeout_seconds=s)`` wraps the dataset
in one, as Energon does.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from energon_lite.errors import ConfigError
from energon_lite.loader.savable_dataset import SavableDataset
from energon_lite.worker import WorkerConfig

if TYPE_CHECKING:
    from energon_lite.loader.energon_tree import TreeNode

T_sample = TypeVar("T_sample", covariant=True)


class WatchdogDataset(SavableDataset[T_sample], Generic[T_sample]):
    """``dataset`` watched by a watchdog (see the module docstring)."""

    def __init__(
        self,
        dataset: SavableDataset,
        worker_config: WorkerConfig,
        timeout_seconds: float | None = 60,
        initial_timeout_seconds: float | None = None,
        fail_on_timeout: bool = False,
    ) -> None:
        if worker_config != dataset.worker_config:
            raise ConfigError(
                f"WatchdogDataset(worker_config={worker_config}) differs from the wrapped "
                f"dataset's {dataset.worker_config}; pass the same one"
            )
        for name, value in (
            ("timeout_seconds", timeout_seconds),
            ("initial_timeout_seconds", initial_timeout_seconds),
        ):
            if value is not None and not value > 0:
                raise ConfigError(f"WatchdogDataset: {name}={value!r} must be > 0 (or None)")
        super().__init__(dataset.pipeline, worker_config, dataset.virtual_epoch_length)
        self.datasets = (dataset,)
        self.wrapper_depth = dataset.wrapper_depth
        self.timeout_seconds = timeout_seconds
        self.initial_timeout_seconds = initial_timeout_seconds
        self.fail_on_timeout = fail_on_timeout

    @property
    def dataset(self) -> SavableDataset:
        """The watched dataset."""
        return self.datasets[0]

    def energon_view(self) -> TreeNode:
        return self.dataset.energon_view()

    def _watchdog_trigger(self) -> None:
        message = (
            f"Watchdog triggered. Sample processing took longer than {self.timeout_seconds} "
            "seconds."
        )
        if self.fail_on_timeout:
            raise TimeoutError(message)
        warnings.warn(message, RuntimeWarning, stacklevel=2)

    def watch_settings(
        self, watchdog: tuple[float, float | None] | None
    ) -> tuple[float, float | None, Callable[[], Any] | None] | None:
        """Its own timeouts, whatever the loader's; ``_watchdog_trigger`` on a stall."""
        if self.timeout_seconds is None:
            return None
        return (
            float(self.timeout_seconds),
            self.initial_timeout_seconds,
            lambda: self._watchdog_trigger(),  # looked up at the stall (patchable)
        )

    def __str__(self) -> str:
        return f"WatchdogDataset(dataset={self.dataset})"
