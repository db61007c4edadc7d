"""A Megatron-Energon 7.x state continued here: the rest of its epoch, each sample once.

A job that moves from Energon to energon_lite mid-run restores its last Energon checkpoint
with ``restore_state_rank`` / ``restore_state_global`` as it would one of ours. The state is
first read as plain data (:mod:`energon_lite.resume.energon_import`); this module turns it
into this loader's rank state. What Energon still owed in its epoch is worked out from its
saved positions, and this loader delivers exactly that, in an order of its own, before going
on with its own epochs.

What Energon still owed, per dataset and per Energon worker, is read from each worker's
saved tree (:mod:`energon_lite.resume.energon_owed`): its reader's unread slices and the
samples in its buffers; a worker whose snapshot lies batches behind what it delivered (with
worker processes Energon saves a snapshot every ``checkpoint_every_sec`` and counts the
batches since) is first replayed (:mod:`energon_lite.resume.energon_replay`).

Those samples (as :class:`~energon_lite.state.restore_key.SampleKey`) are shuffled with this
loader's seed and dealt round robin to this rank's workers, which deliver them first (a
Reader's leftover, :mod:`energon_lite.stages.leftover`), then start the next epoch. Every
other stage starts as after an elastic restore (``Stage.elastic_state``).

Refused, naming the part: a replay it cannot make (a packing chain's batches after a
snapshot, nested blends behind one), a wrapper this module does not know, a
generator hook part-way through its outputs, a blend epochized here, a canonical layout, a
chain composed by hand, and a state whose positions do not fit this loader's dataset. The
restored state holds the remaining keys until they are delivered (O(samples left in the
epoch)).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from energon_lite.errors import StateError, short_repr
from energon_lite.resume.elastic import dealt_chain
from energon_lite.resume.energon_owed import Leaf, Replay, Walk
from energon_lite.resume.rank_state import RankState
from energon_lite.resume.target import RestoreTarget
from energon_lite.rng import derive_seed
from energon_lite.stages.elastic_deal import ElasticDeal, LeafWork
from energon_lite.state.restore_key import SampleKey


def energon_rank_states(plain: Any, target: RestoreTarget) -> list[RankState]:
    """Every rank's state for the ``target`` loader from Energon's ``save_state_global()``
    list (or one rank's ``save_state_rank()``), read as plain data
    (:func:`energon_lite.resume.energon_import.read_energon_state`)."""
    wc = target.worker_config
    if isinstance(plain, dict):
        ranks: list[Any] = [None] * wc.world_size
        ranks[wc.rank] = plain
    else:
        if len(plain) != wc.world_size:
            raise StateError(
                f"Energon state: {len(plain)} ranks' states for a loader of world_size "
                f"{wc.world_size}; restore an Energon run on its own number of ranks"
            )
        ranks = plain
    return [
        _rank_state(state, rank, target) if state is not None else _fresh_rank(rank, target)
        for rank, state in enumerate(ranks)
    ]


def _rank_state(state: dict[str, Any], rank: int, target: RestoreTarget) -> RankState:
    readers = target.readers()
    if readers is None:
        raise StateError(
            "an Energon state restores into a loader of a dataset, not a chain composed by hand"
        )
    config = target.config
    if target.canonical is not None:
        raise StateError("an Energon state does not restore into a canonical_layout loader")
    if config.get("blend_mode") == "epochized":
        raise StateError(
            "an Energon state does not restore into a blend_epochized loader (Energon's "
            "weighted blend draws by weight; restore it into a weighted blend)"
        )
    workers = state.get("workers")
    if not isinstance(workers, list) or not workers:
        raise StateError(f"Energon state: workers={short_repr(workers)} is not a list")
    G = target.worker_config.world_size * len(workers)
    leaves = [Leaf(reader, G) for reader in readers]
    weights = config.get("weights") if config.get("blend_mode") == "weights" else None
    if not isinstance(weights, list) or not all(isinstance(w, (int, float)) for w in weights):
        weights = None  # a weight schedule: a replay behind a snapshot is refused, naming it
    replay = Replay(state.get("micro_batch_size"), weights, config.get("shuffle_buffer_size"))
    owed: list[dict[SampleKey, None]] = [{} for _ in leaves]  # ordered sets
    epochs = [0] * len(leaves)
    delivered = 0
    for w, worker in enumerate(workers):
        g = rank * len(workers) + w
        where = f"Energon rank {rank} worker {w}"
        walk = Walk(leaves, g, where, replay)
        walk.worker(worker)
        delivered += walk.batches
        for leaf, keys in enumerate(walk.owed):
            for key in keys:
                if key in owed[leaf]:
                    raise StateError(
                        f"{where}: {short_repr(key)} is owed twice; the state is corrupt"
                    )
                owed[leaf][key] = None
            epochs[leaf] = max(epochs[leaf], walk.epochs[leaf])
    return _dealt(owed, epochs, rank, G, delivered, target)


def _fresh_rank(rank: int, target: RestoreTarget) -> RankState:
    return RankState(
        {**target.config, "rank": rank}, 0, 0, [None] * target.worker_config.workers_per_rank, 0
    )


def _dealt(
    owed: list[dict[SampleKey, None]],
    epochs: list[int],
    rank: int,
    old_workers: int,
    delivered: int,
    target: RestoreTarget,
) -> RankState:
    wc = target.worker_config
    per_rank = wc.workers_per_rank
    new_workers = wc.world_size * per_rank
    rng = np.random.default_rng(derive_seed(int(target.config.get("seed") or 0), "energon", rank))
    shares: list[list[list[list[Any]]]] = [[[] for _ in owed] for _ in range(per_rank)]
    for leaf, keys in enumerate(owed):
        ordered = list(keys)
        for n, i in enumerate(rng.permutation(len(ordered))):
            shares[n % per_rank][leaf].append(["s", *ordered[int(i)]])
    repeat = bool(target.config.get("repeat"))
    chains = []
    for j in range(per_rank):
        template = target.fresh(wc.slot(j))
        if template is None:
            raise StateError("an Energon state restores into a loader of a dataset only")
        deal = ElasticDeal(
            worker=rank * per_rank + j,
            workers=new_workers,
            old_workers=old_workers,
            epoch=0,
            blend_epoch=0,
            reader_repeat=repeat,
            delivered=delivered,
            leaves=_work(shares[j], epochs),
        )
        chains.append(dealt_chain(template, deal, target.stages))
    return RankState({**target.config, "rank": rank}, 0, 0, chains, 0)


def _work(keys: list[list[list[Any]]], epochs: list[int]) -> Iterator[LeafWork]:
    return iter(LeafWork(k, [], e) for k, e in zip(keys, epochs))
