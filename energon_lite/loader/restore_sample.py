"""``restore_sample``: build a delivered batch (or sample) again from its ``__restore_key__``.

Energon's ``SavableDataLoader.restore_sample(restore_key)`` re-creates an item from its key,
for debugging a batch seen in training. Here the key is the item's ``__restore_key__``: a
batch's is the list of its samples' keys, an unbatched sample's is one typed key
(:mod:`energon_lite.state.restore_key`), and either may be given in its plain form (``to_plain``).
A chain of the dataset's stages is built in the calling process and ``fetch`` runs the
reading, decoding, ``encode_sample``, packing, batching and ``encode_batch`` again; per-sample
randomness is keyed by the restore key, so the result equals the delivered item whichever
worker made it. A single sample's key on a batching pipeline gives that sample as it entered
the batcher.
"""

from __future__ import annotations

from typing import Any

from energon_lite.errors import StateError, short_repr
from energon_lite.loader.savable_dataset import SavableDataset
from energon_lite.stages.base import Stage
from energon_lite.state.restore_key import (
    IndexKey,
    PackKey,
    RestoreKey,
    SampleKey,
    SubKey,
    from_plain,
)

_TYPED = (SampleKey, PackKey, SubKey, IndexKey)


def normalize_key(restore_key: Any) -> RestoreKey | list[RestoreKey]:
    """One typed key, or a batch's list of them, from typed or plain forms; StateError otherwise."""
    if isinstance(restore_key, _TYPED):
        return restore_key
    if isinstance(restore_key, (list, tuple)) and restore_key:
        if isinstance(restore_key[0], str):  # one key in plain form: tag first
            return from_plain(restore_key)
        return [from_plain(member) for member in restore_key]
    raise StateError(f"restore_sample: not a restore key: {short_repr(restore_key)}")


def _chain(dataset: SavableDataset) -> Stage:
    chain = dataset.pipeline.build(dataset.worker_config.slot(0))
    chain.restore_state(None)
    return chain


def restore_sample(dataset: SavableDataset, restore_key: Any) -> Any:
    """The batch (or sample) whose ``__restore_key__`` is ``restore_key``, made again."""
    try:
        key = normalize_key(restore_key)
    except StateError:
        raise StateError(
            f"restore_sample: {short_repr(restore_key)} is not a restore key (give a batch's or "
            "sample's __restore_key__, typed or in its plain form)"
        ) from None
    try:
        chain = _chain(dataset)
        with chain.context.running():  # a hook made again sees the indices it saw
            return chain.fetch(key)
    except (StateError, IndexError, KeyError) as exc:
        raise StateError(
            f"restore_sample: restore key {short_repr(restore_key)} does not belong to this "
            f"loader's datasets: {exc}"
        ) from None


def can_restore_sample(dataset: SavableDataset) -> bool:
    """Whether every stage of the dataset's chain can fetch by restore key."""
    stage: Stage | None = _chain(dataset)
    pending = [stage] if stage is not None else []
    while pending:
        stage = pending.pop()
        parents = stage._parents()
        if not parents and type(stage).fetch is Stage.fetch:
            return False  # a source stage without random access
        pending.extend(parents)
    return True
