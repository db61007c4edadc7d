"""Energon's module path `megatron.energon.wrappers.watchdog_dataset`: ``WatchdogDataset``
(defined in ``energon_lite.loader.watchdog_dataset``, where ``get_loader`` reaches it)."""

from __future__ import annotations

from energon_lite.loader.watchdog_dataset import WatchdogDataset

__all__ = ["WatchdogDataset"]
