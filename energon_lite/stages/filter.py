"""``Filter``: keeps the items for which a predicate is true (Energon's ``FilterDataset``).

``SkipSample`` from the predicate drops the item; other errors are logged with the item's
key and counted by the failure tracker (the item is dropped). Stateless beyond its source,
and items pass through unchanged, so ``fetch`` is the source's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from energon_lite.errors import SKIPPED, FailureTracker, guarded
from energon_lite.samples.types import basic_sample_keys
from energon_lite.stages.base import Stage
from energon_lite.state.restore_key import RestoreKey


class Filter(Stage):
    source: Stage  # always set: this stage has one parent

    def __init__(
        self,
        source: Stage,
        predicate: Callable[[Any], bool],
        failures: FailureTracker | None = None,
    ) -> None:
        self.source = source
        self.predicate = predicate
        self.failures = failures or FailureTracker(0)

    def next(self) -> Any:
        while True:
            item = self.source.next()
            keep = guarded(self.failures, "filter_fn", _where, self.predicate, item)
            if keep is not SKIPPED and keep:
                return item

    def key_of(self, item: Any) -> RestoreKey | None:
        return self.source.key_of(item)  # items pass through unchanged


def _where(item: Any) -> dict[str, Any]:
    return {"key": basic_sample_keys(item)["__key__"]}
