"""Saved states are user data: states written by an earlier version restore and continue.

Each case builds a loader over data made here (text shards and raw-image HDF5 episodes, so
the bytes do not depend on an image codec's version), restores the state committed in
``tests/golden_states/<case>.msgpack`` and checks that the next batches are the ones that
loader delivered when the state was written. A change that breaks one of these makes an
older checkpoint unreadable: add a reader for the old form, or refuse it by version.

The files were written before the package layout changed (``python
tests/test_golden_states.py --write`` writes them again; only do that for a deliberate,
versioned state change, and say so in the commit message).
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

import energon_lite as el
from energon_lite.errors import StateError

GOLDEN = Path(__file__).parent / "golden_states"
NEXT_BATCHES = 4
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


# data ---------------------------------------------------------------------------------------


def write_text_dataset(root: Path, name: str, num_samples: int, per_shard: int) -> Path:
    """Tar shards of ``.txt`` samples whose length varies with the index; prepared as text."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    for shard, start in enumerate(range(0, num_samples, per_shard)):
        with tarfile.open(folder / f"{name}-{shard}.tar", "w", format=tarfile.GNU_FORMAT) as tar:
            for index in range(start, min(num_samples, start + per_shard)):
                words = [WORDS[(index * 7 + i) % len(WORDS)] for i in range(1 + index % 9)]
                data = f"{name} {index}: {' '.join(words)}".encode()
                info = tarfile.TarInfo(f"{name}{index:05d}.txt")
                info.size, info.mtime = len(data), 0
                tar.addfile(info, io.BytesIO(data))
    el.prepare_dataset(
        folder,
        split_ratio=[("train", 1)],
        sample_type="TextSample",
        field_map={"text": "txt"},
        progress=False,
    )
    return folder


def write_metadataset(root: Path, name: str, mode: str, entries: list[tuple[str, float]]) -> Path:
    field = "weight" if mode == "blend" else "repetitions"
    lines = ["__module__: megatron.energon", "__class__: MetadatasetV2", "splits:", "  train:"]
    lines.append(f"    {mode}:")
    for path, value in entries:
        lines += [f"      - path: {path}", f"        {field}: {value}"]
    yaml = root / f"{name}.yaml"
    yaml.write_text("\n".join(lines) + "\n")
    return yaml


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_data(tmp_path_factory.mktemp("golden_states"))


def make_data(root: Path) -> Path:
    write_text_dataset(root, "web", 90, 15)
    write_text_dataset(root, "books", 40, 10)
    write_metadataset(root, "weighted", "blend", [("web", 1), ("books", 2)])
    write_metadataset(root, "epochized", "blend_epochized", [("web", 1), ("books", 1.5)])
    from energon_lite.synth.episodes import write_dataset

    write_dataset(root / "episodes", [5, 3, 8, 2, 6, 4, 1, 7], image_size=(6, 8))
    return root


# loaders ------------------------------------------------------------------------------------


class PackingEncoder(el.DefaultTaskEncoder):
    """Packs text samples in twos and groups the packs by total length parity."""

    def select_samples_to_pack(self, samples: list[Any]) -> list[list[Any]]:
        return [samples[i : i + 2] for i in range(0, len(samples) - 1, 2)]

    def pack_selected_samples(self, samples: list[Any]) -> Any:
        return el.TextSample(
            __key__="+".join(s.__key__ for s in samples),
            __restore_key__=(),
            __subflavors__=None,
            text=" | ".join(s.text for s in samples),
        )

    def batch_group_criterion(self, sample: Any) -> tuple[Any, int]:
        return len(sample.text) % 2, 3


def _wc(workers: int) -> el.WorkerConfig:
    return el.WorkerConfig(rank=0, world_size=1, num_workers=workers, seed_offset=7)


def _text_loader(path: Path, workers: int = 2, **kwargs: Any) -> el.SavableLoader:
    args = {"batch_size": 4, "shuffle_buffer_size": 8, "max_samples_per_sequence": 5, **kwargs}
    return el.get_savable_loader(el.get_train_dataset(path, worker_config=_wc(workers), **args))


def _unbatched(path: Path, wc: el.WorkerConfig) -> Any:
    return el.get_train_dataset(
        path, worker_config=wc, batch_size=None, shuffle_buffer_size=5, max_samples_per_sequence=5
    )


def _batch_generic(root: Path) -> el.SavableLoader:
    wc = _wc(2)
    return el.get_savable_loader(
        el.BatchDataset(_unbatched(root / "web", wc), 3, el.generic_batch, worker_config=wc)
    )


def _mix_batch(root: Path) -> el.SavableLoader:
    wc = _wc(0)
    return el.get_savable_loader(
        el.MixBatchDataset(
            (
                el.BatchDataset(
                    _unbatched(root / "web", wc), 1, el.generic_batch, worker_config=wc
                ),
                1,
            ),
            (
                el.BatchDataset(
                    _unbatched(root / "books", wc), 1, el.generic_batch, worker_config=wc
                ),
                3,
            ),
            batch_size=4,
            batch_mix_fn=el.homogeneous_concat_mix,
            worker_config=wc,
        )
    )


def _episodes(root: Path) -> el.SavableLoader:
    from energon_lite.flavors.episodes import compute_norm_stats, create_qc_dataloader_v3

    folder = root / "episodes"
    _, loader = create_qc_dataloader_v3(
        folder,
        ["cam_high", "cam_left_wrist"],
        compute_norm_stats(folder),
        3,
        episodes_per_epoch=4,
        batch_size=3,
        epoch_seed=1,
        positive_ratio=0.5,
        steps_per_epoch=20,
        num_workers=2,
        pin_memory=False,
    )
    return loader


CASES: dict[str, Callable[[Path], el.SavableLoader]] = {
    "single_folder": lambda root: _text_loader(root / "web"),
    "weighted_blend": lambda root: _text_loader(root / "weighted.yaml"),
    "epochized_blend": lambda root: _text_loader(root / "epochized.yaml"),
    "packing_grouped": lambda root: _text_loader(
        root / "web", task_encoder=PackingEncoder(), packing_buffer_size=6
    ),
    "batch_generic_batch": _batch_generic,
    "mix_batch": _mix_batch,
    "episodes": _episodes,
}
BATCHES_BEFORE_SAVE = {"episodes": 3}


def batch_keys(batch: Any) -> list[str]:
    """What identifies a batch: its samples' keys (episodes: their restore keys)."""
    if isinstance(batch, dict):
        return [json.dumps(k) for k in _plain(batch["__restore_key__"])]
    keys = batch.__key__
    return [str(k) for k in (keys if isinstance(keys, list) else [keys])]


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value.tolist() if hasattr(value, "tolist") else value


def _take(batches: Iterator[Any], n: int) -> list[list[str]]:
    return [batch_keys(next(batches)) for _ in range(n)]


def _read_state(case: str) -> Any:
    return msgpack.unpackb(
        (GOLDEN / f"{case}.msgpack").read_bytes(), raw=False, strict_map_key=False
    )


# the test -----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_state_saved_before_the_layout_change_restores_and_continues(
    data: Path, case: str
) -> None:
    recorded = json.loads((GOLDEN / f"{case}.json").read_text())
    state = _read_state(case)
    loader = CASES[case](data)
    loader.restore_state_rank(state)
    batches = iter(loader)
    assert _take(batches, NEXT_BATCHES) == recorded["next"]


def test_a_golden_state_edited_by_hand_is_still_refused(data: Path) -> None:
    state = _read_state("single_folder")
    state["epoch"] = 3
    with pytest.raises(StateError, match="digest"):
        CASES["single_folder"](data).restore_state_rank(state)


def write_goldens(root: Path) -> None:
    GOLDEN.mkdir(exist_ok=True)
    make_data(root)
    for case, make in sorted(CASES.items()):
        loader = make(root)
        batches = iter(loader)
        _take(batches, BATCHES_BEFORE_SAVE.get(case, 5))
        state = loader.save_state_rank()
        following = _take(batches, NEXT_BATCHES)
        (GOLDEN / f"{case}.msgpack").write_bytes(msgpack.packb(state, use_bin_type=True))
        (GOLDEN / f"{case}.json").write_text(json.dumps({"next": following}, indent=1) + "\n")
        print(
            f"{case}: {len(msgpack.packb(state, use_bin_type=True))} bytes, next {following[0][:3]}..."
        )


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_golden_states.py --write")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        write_goldens(Path(tmp))
