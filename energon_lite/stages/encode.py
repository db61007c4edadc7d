"""``Encode``: raw sample -> decoded, typed sample -> ``TaskEncoder.encode_sample``.

Per raw sample: pick the leaf dataset's factory (by the restore key's leaf), decode the
parts the factory needs, build the typed sample (or the crude dict, then cook it), attach
the leaf's subflavors, and call ``encode_sample`` (or ``preencode_sample`` when packing)
with the sample's derived generator in place. A sample that fails anywhere is logged with
its key and shard and skipped; ``SkipSample`` skips silently. Deterministic for a given
restore key, so ``fetch`` re-encodes a buffered sample identically.

State: none of its own (1:1 or filtering), only its source's.
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from energon_lite.errors import SKIPPED, ConfigError, FailureTracker, guarded
from energon_lite.restore_key import SampleKey
from energon_lite.sample_factory import SampleFactory
from energon_lite.stage import Stage
from energon_lite.task_encoder import TaskEncoder


@dataclass
class LeafSpec:
    """How samples of one leaf dataset become typed samples."""

    factory: SampleFactory
    subflavors: dict[str, Any] | None = None


class Encode(Stage):
    source: Stage  # always set: this stage has one parent

    def __init__(
        self,
        source: Stage,
        leaves: Sequence[LeafSpec],
        task_encoder: TaskEncoder,
        seed: int,
        failures: FailureTracker,
        hook: str = "encode_sample",
    ) -> None:
        self.source = source
        self.leaves = list(leaves)
        self.task_encoder = task_encoder
        self.seed = seed
        self.failures = failures
        self.hook = getattr(task_encoder, hook) if task_encoder.overrides(hook) else None
        self.cook = task_encoder.overrides("cook_crude_sample") or bool(task_encoder.cookers)

    def encode(self, raw: dict[str, Any]) -> Any:
        restore_key: SampleKey = raw["__restore_key__"]
        leaf = self.leaves[restore_key.leaf]
        te = self.task_encoder
        te._set_sample_context(self.seed, restore_key)
        sample = leaf.factory.build(raw, te.decoder, leaf.subflavors)
        if leaf.factory.crude and self.cook:
            sample = te.cook_crude_sample(sample)
        if self.hook is not None:
            sample = self.hook(sample)
            if isinstance(sample, types.GeneratorType):
                raise ConfigError(
                    f"{type(te).__name__}.{self.hook.__name__} returned a generator: hooks that "
                    "yield several samples per input are not supported; return one sample (or "
                    "raise SkipSample)"
                )
        return sample

    def next(self) -> Any:
        while True:
            raw = self.source.next()
            sample = guarded(self.failures, "encode_sample", _where, self.encode, raw)
            if sample is not SKIPPED:
                return sample

    def fetch(self, restore_key: Any) -> Any:
        return self.encode(self.source.fetch(restore_key))


def _where(raw: dict[str, Any]) -> dict[str, Any]:
    return {"key": raw.get("__key__"), "shard": raw.get("__shard__")}
