"""A state saved by megatron-energon 7.x restores here, exactly once for the rest of its epoch.

megatron-energon (the `bench` extra) saves the state in each test, as its users do
(``torch.save(loader.save_state_rank())``); the bytes are read back with every
``megatron`` module made unimportable, so nothing of Energon runs, and the loader here
delivers the samples of Energon's epoch that Energon had not delivered: each once, none of
those Energon delivered. Then it goes on with its own next epoch.
"""

from __future__ import annotations

import io
import pickle
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import energons_loader, oracle

import energon_lite as el
from energon_lite.errors import StateError
from energon_lite.resume.energon_import import read_energon_state
from energon_lite.resume.energon_owed import energon_slices
from energon_lite.state.restore_key import PackKey, SampleKey
from energon_lite.synth.shards import write_captioning_shards

energon = oracle(reason="megatron-energon (the bench extra) saves the states here")

PER_SLICE = 5
BATCH = 4


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name, count, per_shard in (("a", 60, 20), ("b", 36, 12)):
        root = tmp_path_factory.mktemp(name)
        write_captioning_shards(
            root, count, per_shard, image_size=(8, 8), key_format=name + "{:04d}"
        )
        el.prepare_dataset(
            root,
            split_ratio=[("train", 1)],
            sample_type="CaptioningSample",
            field_map={"image": "jpg", "caption": "txt"},
            progress=False,
        )
        out[name] = root
    blend = tmp_path_factory.mktemp("blend") / "blend.yaml"
    blend.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        f"      - weight: 3\n        path: {out['a']}\n"
        f"      - weight: 1\n        path: {out['b']}\n"
    )
    out["blend"] = blend
    return out


def _packing_encoder(lib: Any) -> Any:
    class Pairs(lib.DefaultTaskEncoder):
        """Packs samples two by two (a packing chain: reading and pre-packing buffers)."""

        def select_samples_to_pack(self, samples: list[Any]) -> list[list[Any]]:
            return [samples[i : i + 2] for i in range(0, len(samples), 2)]

        def pack_selected_samples(self, samples: list[Any]) -> Any:
            return lib.TextSample(
                __key__="+".join(s.__key__ for s in samples),
                __restore_key__=(),
                __subflavors__=None,
                text=" | ".join(s.caption for s in samples),
            )

    return Pairs()


def _dataset(
    lib: Any, path: Path, workers: int, packing: bool, rank: int = 0, ranks: int = 1, **extra: Any
) -> Any:
    if packing:
        extra.update(task_encoder=_packing_encoder(lib), packing_buffer_size=6)
    return lib.get_train_dataset(
        path,
        worker_config=lib.WorkerConfig(rank=rank, world_size=ranks, num_workers=workers),
        batch_size=BATCH,
        shuffle_buffer_size=8,
        max_samples_per_sequence=PER_SLICE,
        **extra,
    )


def _samples(batch: Any) -> list[str]:
    return [k for key in batch.__key__ for k in key.split("+")]


def _energon_saved(
    path: Path, workers: int, batches: int, packing: bool, current: bool = True
) -> tuple[bytes, list[str]]:
    """Energon delivers ``batches`` batches and saves; its state as torch.save bytes. With
    ``current`` every worker snapshot is current (offset 0); else Energon's default
    snapshots (every 60 s) lie behind by the batches delivered since (offset > 0)."""
    every: dict[str, Any] = {}
    if current:
        every = {"checkpoint_every_sec": 0, "checkpoint_every_min_n_samples": 1}
    with energons_loader(
        energon.get_savable_loader(_dataset(energon, path, workers, packing), **every)
    ) as loader:
        it = iter(loader)
        delivered = [k for _ in range(batches) for k in _samples(next(it))]
        state = loader.save_state_rank()
    offsets = [getattr(w, "offset", 0) for w in state.worker_states]
    assert (max(offsets) == 0) == (current or workers == 0), offsets
    print(f"Energon's worker snapshots are {offsets} batches behind")
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue(), delivered


def _without_energon(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every megatron module unimportable, as where megatron-energon is not installed (the
    package itself too: the tests import it on first use, so it may not be loaded yet)."""
    names = {n for n in sys.modules if n == "megatron" or n.startswith("megatron.")}
    for name in sorted(names | {"megatron", "megatron.energon"}):
        monkeypatch.setitem(sys.modules, name, None)


@pytest.mark.parametrize(
    "kind, workers, current",
    [
        ("plain", 0, True),
        ("plain", 2, False),  # Energon's default snapshots, batches behind: replayed
        ("blend", 0, True),
        ("blend", 2, False),
        ("packing", 0, True),
        ("packing", 2, True),  # current snapshots (a packing chain is not replayed)
    ],
)
@pytest.mark.usefixtures("collector_spared")  # Energon collects garbage
def test_energon_state_restores_exactly_once(
    roots: dict[str, Path], kind: str, workers: int, current: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = roots["blend" if kind == "blend" else "a"]
    epoch = {f"a{i:04d}" for i in range(60)} | (
        {f"b{i:04d}" for i in range(36)} if kind == "blend" else set()
    )
    data, theirs = _energon_saved(path, workers, 5, packing=kind == "packing", current=current)
    assert theirs and set(theirs) <= epoch and len(set(theirs)) == len(theirs)

    _without_energon(monkeypatch)
    state = read_energon_state(data)
    loader = el.get_savable_loader(_dataset(el, path, 1, packing=kind == "packing"))
    loader.restore_state_rank(state)
    ours: list[str] = []
    later: list[str] = []  # the next epoch's
    it = iter(loader)
    for _ in range(200):  # bounded: the rest of the epoch is at most 96 samples
        batch = next(it)
        for key, drawn in zip(_samples(batch), _epochs(batch)):
            (later if drawn > 0 else ours).append(key)
        if len(later) > len(epoch):
            break
    overlap = set(ours) & set(theirs)
    missing = epoch - set(ours) - set(theirs)
    repeated = [k for k, n in Counter(ours).items() if n > 1]
    print(
        f"{kind}, {workers} Energon workers, current={current}: Energon delivered {len(theirs)}, we delivered "
        f"{len(ours)} of its epoch; overlap {len(overlap)}, missing {len(missing)}, "
        f"repeated {len(repeated)}"
    )
    assert (overlap, missing, repeated) == (set(), set(), [])
    assert len(ours) + len(theirs) == len(epoch)


def _epochs(batch: Any) -> list[int]:
    """The reader epoch of each sample of ``batch`` (a pack's members one by one)."""
    return [epoch for key in batch.__restore_key__ for epoch in _epochs_of(key)]


def _epochs_of(key: Any) -> list[int]:
    if isinstance(key, SampleKey):
        return [key.epoch]
    if isinstance(key, PackKey):
        return [epoch for member in key.members for epoch in _epochs_of(member)]
    raise AssertionError(f"no sample key in {key!r}")


@pytest.mark.usefixtures("collector_spared")  # Energon collects garbage
def test_a_global_state_of_two_ranks_restores_exactly_once(
    roots: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """save_state_global's list (2 ranks x 2 workers, Energon's default snapshots, two open
    slices per worker so that pending slices are opened in the replay): each rank here
    delivers its rank's rest, together the rest of the epoch once."""
    states, theirs = [], []
    for rank in range(2):
        with energons_loader(
            energon.get_savable_loader(
                _dataset(energon, roots["a"], 2, False, rank, 2, parallel_shard_iters=2)
            )
        ) as loader:
            it = iter(loader)
            theirs += [k for _ in range(5) for k in _samples(next(it))]
            states.append(loader.save_state_rank())
        assert max(w.offset for w in states[-1].worker_states) > 0
    data = pickle.dumps(states)  # as save_state_global() gathers them
    _without_energon(monkeypatch)
    plain = read_energon_state(data)
    ours: list[str] = []
    for rank in range(2):
        loader = el.get_savable_loader(
            _dataset(el, roots["a"], 2, False, rank, 2, parallel_shard_iters=2)
        )
        loader.restore_state_global(plain)
        it = iter(loader)
        for _ in range(40):
            batch = next(it)
            ours += [k for k, e in zip(_samples(batch), _epochs(batch)) if e == 0]
    epoch = {f"a{i:04d}" for i in range(60)}
    print(f"2 ranks: Energon delivered {len(theirs)}, we delivered {len(ours)}")
    assert not set(ours) & set(theirs) and len(ours) == len(set(ours))
    assert set(ours) | set(theirs) == epoch


@pytest.mark.usefixtures("collector_spared")  # Energon collects garbage
def test_plain_pickle_and_objects_read_alike(roots: dict[str, Path]) -> None:
    data, _ = _energon_saved(roots["a"], 2, 2, packing=False)
    restored = torch.load(io.BytesIO(data), weights_only=False)  # with Energon installed
    plain = read_energon_state(data)
    assert read_energon_state(pickle.dumps(restored)) == plain == read_energon_state(restored)
    assert plain["type"] == "EnergonState" and len(plain["workers"]) == 2
    global_list = read_energon_state(pickle.dumps([restored]))
    assert global_list == [plain]


class Planted:
    def __reduce__(self) -> tuple[Any, ...]:
        return (print, ("code ran",))


def test_a_planted_class_is_refused_without_running(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(StateError, match=r"names builtins\.print, which is not part of a state"):
        read_energon_state(pickle.dumps({"worker_states": [Planted()]}))
    assert "code ran" not in capsys.readouterr().out


@pytest.mark.usefixtures("collector_spared")  # Energon collects garbage
def test_a_packing_chain_behind_its_snapshot_is_refused_naming_it(
    roots: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Energon's default snapshots lie batches behind; a packing chain's batches after one
    are the user's groups of decoded samples, not replayed: refused, naming the part."""
    data, _ = _energon_saved(roots["a"], 2, 5, packing=True, current=False)
    _without_energon(monkeypatch)
    ours = el.get_savable_loader(_dataset(el, roots["a"], 1, True))
    with pytest.raises(StateError, match=r"worker \d: Energon's 'PackingDataset' is not replayed"):
        ours.restore_state_rank(read_energon_state(data))


@pytest.mark.usefixtures("collector_spared")  # Energon collects garbage
def test_another_dataset_layout_is_refused(
    roots: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    data, _ = _energon_saved(roots["a"], 0, 3, packing=False)
    _without_energon(monkeypatch)
    other = el.get_train_dataset(
        roots["a"],
        worker_config=el.WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=BATCH,
        shuffle_buffer_size=8,
        max_samples_per_sequence=7,  # Energon's run cut slices of 5
    )
    with pytest.raises(StateError, match="max_samples_per_sequence differ"):
        el.get_savable_loader(other).restore_state_rank(read_energon_state(data))


@pytest.mark.parametrize("per_slice", [None, 3, 5, 8])
@pytest.mark.parametrize("counts, workers", [([20, 20, 20], 3), ([7, 30, 2, 11], 4), ([5], 2)])
def test_energon_slices_are_energons(
    counts: list[int], workers: int, per_slice: int | None
) -> None:
    """The slices the import reads Energon's positions against are Energon's own (its
    Sharder, the oracle), for every global worker."""
    from megatron.energon.flavors.webdataset.sharder import Sharder
    from megatron.energon.flavors.webdataset.structs import ShardInfo

    from energon_lite.stages.dealing import worker_bounds

    shards = [ShardInfo(name=f"s{i}", path=None, count=c) for i, c in enumerate(counts)]
    cum = np.concatenate([[0], np.cumsum(counts)])
    bounds = worker_bounds(sum(counts), workers)
    theirs = Sharder.shard_workers(
        shards,
        energon.WorkerConfig(rank=0, world_size=1, num_workers=workers),
        max_samples_per_sequence=per_slice,
    )
    ours = [
        energon_slices(cum, int(bounds[g]), int(bounds[g + 1]), per_slice) for g in range(workers)
    ]
    assert [list(t) for t in theirs] == ours


@pytest.mark.usefixtures("collector_spared")  # Energon collects garbage
def test_an_unknown_wrapper_is_refused_naming_it(
    roots: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    data, _ = _energon_saved(roots["a"], 0, 3, packing=False)
    state = read_energon_state(data)
    level = state["workers"][0]["dataset"]
    while level["__class__"] != "ShuffleBufferDataset":
        level = level["datasets"][0]
    level["__class__"] = "GroupBatchDataset"  # holds samples in buckets: not read here
    _without_energon(monkeypatch)
    loader = el.get_savable_loader(_dataset(el, roots["a"], 1, False))
    with pytest.raises(StateError, match="Energon's 'GroupBatchDataset' is not a wrapper"):
        loader.restore_state_rank(state)
