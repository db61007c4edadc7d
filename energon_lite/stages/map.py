"""``Map``: applies a function to every item (``encode_batch`` and similar 1:1 steps).

``SkipSample`` from the function drops the item; other errors are logged with the item's
keys and counted by the failure tracker. Stateless beyond its source.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from energon_lite.errors import SKIPPED, ConfigError, FailureTracker, guarded
from energon_lite.samples.types import basic_sample_keys
from energon_lite.stages.base import Stage


class Map(Stage):
    STATS_LABEL = "encode_batch"
    STATS_HINT = "encode_batch is {percent}%: move it onto the GPU, or {more_workers}"
    source: Stage  # always set: this stage has one parent

    def __init__(
        self,
        source: Stage,
        fn: Callable[[Any], Any],
        name: str,
        failures: FailureTracker | None = None,
    ) -> None:
        self.source = source
        self.fn = fn
        self.name = name
        self.failures = failures or FailureTracker(0)

    def next(self) -> Any:
        while True:
            item = self.source.next()
            out = guarded(self.failures, self.name, _where, self.fn, item)
            if isinstance(out, types.GeneratorType):
                raise ConfigError(
                    f"{self.name} returned a generator: yielding several items per batch is not "
                    "supported (encode_sample may yield); return one item"
                )
            if out is not SKIPPED:
                return out

    def fetch(self, restore_key: Any) -> Any:
        return self.fn(self.source.fetch(restore_key))


def _where(item: Any) -> dict[str, Any]:
    return {"key": basic_sample_keys(item)["__key__"]}
