"""Energon's dataset wrapper classes (energon_lite/wrappers/): the same compositions through
both libraries give the same items, and compositions resume exactly through the loader."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import make_dataset, oracle

import energon_lite as el
from energon_lite.errors import ConfigError, StateError
from energon_lite.testing import assert_loader_resumes

energon = oracle()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 captioning samples in 6 shards of 10, all in train."""
    return make_dataset(tmp_path_factory.mktemp("wrappers"), 60, 10)


# the same user code for both libraries --------------------------------------------------


def pairs(items: Iterator[Any]) -> Iterator[Any]:
    """An iter-map that takes two samples per output."""
    for first in items:
        second = next(items, None)
        if second is None:
            return
        yield (first, second)


def twice(sample: Any) -> Iterator[Any]:
    """A generator map: two outputs per sample."""
    yield sample
    yield dataclasses.replace(sample, caption=sample.caption.upper())


def by_parity(sample: Any) -> tuple[int, None]:
    return int(sample.__key__[:6]) % 2, None


def select_pairs(samples: list[Any]) -> list[list[Any]]:
    return [samples[i : i + 2] for i in range(0, len(samples), 2)]


def joined(lib: Any) -> Callable[[list[Any]], Any]:
    def pack(samples: list[Any]) -> Any:
        return lib.CaptioningSample(
            __key__="+".join(s.__key__ for s in samples),
            __restore_key__=(),
            __subflavors__=None,
            image=samples[0].image,
            caption="|".join(s.caption[:9] for s in samples),
        )

    return pack


def joined_pairs(items: Iterator[Any]) -> Iterator[Any]:
    """An iter-map that joins two samples into one."""
    for pair in pairs(items):
        yield joined(el)(list(pair))


def val(lib: Any, root: Path, wc: Any) -> Any:
    return lib.get_val_dataset(root, split_part="train", batch_size=None, worker_config=wc)


COMPOSITIONS: dict[str, Callable[[Any, Path, Any], Any]] = {
    "Limit(Batch(Filter(Map)))": lambda lib, root, wc: lib.LimitDataset(
        lib.BatchDataset(
            lib.FilterDataset(
                lib.MapDataset(val(lib, root, wc), lambda s: s, worker_config=wc),
                filter_fn=lambda s: int(s.__key__) % 3 != 0,
                worker_config=wc,
            ),
            4,
            lib.generic_batch,
            worker_config=wc,
        ),
        7,
        worker_config=wc,
    ),
    "Concat(Repeat, Log(Gc))": lambda lib, root, wc: lib.ConcatDataset(
        lib.RepeatDataset(val(lib, root, wc), repeats=1.5, worker_config=wc),
        lib.LogSampleDataset(
            lib.GcDataset(val(lib, root, wc), worker_config=wc), "val", worker_config=wc
        ),
        worker_config=wc,
    ),
    "IterMap(Map with a generator)": lambda lib, root, wc: lib.IterMapDataset(
        lib.MapDataset(val(lib, root, wc), twice, worker_config=wc), pairs, worker_config=wc
    ),
    "GroupBatch": lambda lib, root, wc: lib.GroupBatchDataset(
        val(lib, root, wc), 4, by_parity, lib.generic_batch, worker_config=wc
    ),
    "Packing, Epochize": lambda lib, root, wc: lib.EpochizeDataset(
        lib.PackingDataset(val(lib, root, wc), 6, select_pairs, joined(lib), worker_config=wc),
        11,
        worker_config=wc,
    ),
}


def _identity(item: Any) -> Any:
    if isinstance(item, (tuple, list)):
        return [_identity(x) for x in item]
    caption = item.caption if isinstance(item.caption, str) else list(item.caption)
    return item.__key__, caption, torch.as_tensor(item.image).sum().item()


@pytest.mark.parametrize("name", list(COMPOSITIONS))
@pytest.mark.usefixtures("collector_spared")  # Energon collects garbage
def test_composition_yields_what_energon_yields(name: str, data: Path) -> None:
    got = {}
    for lib in (el, energon):
        wc = lib.WorkerConfig(rank=0, world_size=1, num_workers=0)
        ds = COMPOSITIONS[name](lib, data, wc)
        got[lib.__name__] = (len(ds), [_identity(x) for x in lib.get_loader(ds)])
    ours, theirs = got["energon_lite"], got["megatron.energon"]
    assert ours[1], "the composition yielded nothing"
    assert ours == theirs


# blends: weights, restore-key routing, exact resume --------------------------------------


def _train(root: Path, wc: el.WorkerConfig, batch_size: int | None, te: Any = None) -> Any:
    return el.get_train_dataset(
        root,
        worker_config=wc,
        batch_size=batch_size,
        shuffle_buffer_size=None,
        max_samples_per_sequence=5,
        task_encoder=te,
    )


@dataclasses.dataclass
class SourceBatch(el.Batch):
    image: torch.Tensor
    caption: list[str]
    source: int


class Tagging(el.TaskEncoder):
    """Tags every batch with the dataset it came from (Energon's test_mixing_* encoders)."""

    def __init__(self, source: int) -> None:
        self.source = source

    def encode_batch(self, batch: Any) -> SourceBatch:
        fields = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
        return SourceBatch(**fields, source=self.source)


def test_blend_of_batched_datasets_draws_by_weight_and_resumes(data: Path) -> None:
    wc = el.WorkerConfig(rank=0, world_size=1, num_workers=0)

    def make(weights: tuple[int, int] = (1, 3)) -> el.SavableLoader:
        blend = el.BlendDataset(
            (_train(data, wc, 2, Tagging(0)), weights[0]),
            (_train(data, wc, 3, Tagging(1)), weights[1]),
            worker_config=wc,
        )
        assert isinstance(blend, el.BlendDataset) and len(blend.datasets) == 2
        return el.get_savable_loader(blend)

    loader = make()
    batches = [b for _, b in zip(range(400), loader)]
    sizes = Counter(len(b.caption) for b in batches)
    assert 70 <= sizes[2] <= 130 and sizes[2] + sizes[3] == 400  # weight 1 of 4
    assert all(b.source == len(b.caption) - 2 for b in batches)
    # a batch made again from its restore key comes from its own dataset's chain (and encoder)
    again = loader.restore_sample(batches[5].__restore_key__)
    assert (again.__key__, again.source) == (batches[5].__key__, batches[5].source)
    assert_loader_resumes(make, 20, [0, 9, 17])
    state = make().save_state_rank()
    with pytest.raises(StateError, match="weights"):
        make((2, 2)).restore_state_rank(state)


def test_mix_batch_concatenates_and_resumes(data: Path) -> None:
    wc = el.WorkerConfig(rank=0, world_size=1, num_workers=0)

    def make() -> el.SavableLoader:
        return el.get_savable_loader(
            el.MixBatchDataset(
                (_train(data, wc, 1, Tagging(0)), 2),
                (_train(data, wc, 1, Tagging(1)), 8),
                batch_size=5,
                batch_mix_fn=el.homogeneous_concat_mix,
                worker_config=wc,
            )
        )

    batches = [b for _, b in zip(range(60), make())]
    assert all(b.image.shape == (5, 3, 16, 16) and len(b.source) == 5 for b in batches)
    sources = Counter(s for b in batches for s in b.source)
    assert 30 <= sources[0] <= 90 and sources[0] + sources[1] == 300
    assert_loader_resumes(make, 12, [0, 5, 11])
    # the default mix function lists the drawn batches
    listed = el.MixBatchDataset(
        (_train(data, wc, 1), 1), (_train(data, wc, 1), 1), batch_size=3, worker_config=wc
    )
    first = next(iter(el.get_loader(listed)))
    assert isinstance(first, list) and len(first) == 3 and len(first[0].caption) == 1


def test_hand_composed_pipeline_resumes_with_workers(data: Path) -> None:
    """Batch(Map(Packing(ShuffleBuffer(Blend of two unbatched datasets)))) with 2 workers:
    the shuffle and packing buffers refetch through the blend on restore."""

    def make(workers: int = 2) -> el.SavableLoader:
        wc = el.WorkerConfig(rank=0, world_size=1, num_workers=workers)
        blend = el.BlendDataset(
            (_train(data, wc, None), 1), (_train(data, wc, None), 2), worker_config=wc
        )
        shuffled = el.ShuffleBufferDataset(blend, 7, worker_config=wc)
        packed = el.PackingDataset(shuffled, 6, select_pairs, joined(el), worker_config=wc)
        mapped = el.MapDataset(packed, lambda s: s, worker_config=wc)
        return el.get_savable_loader(el.BatchDataset(mapped, 3, el.generic_batch, worker_config=wc))

    reference = assert_loader_resumes(make, 24, [0, 7, 13, 22])
    leaves = {leaf for _, key, _ in reference for leaf in re.findall(r"SampleKey\(leaf=(\d)", key)}
    assert leaves == {"0", "1"}  # both datasets, each with its own leaf id
    # another number of workers: refused by name rather than redistributed wrongly
    loader = make()
    batches = iter(loader)
    next(batches)
    state = loader.save_state_rank()
    loader.close()
    with pytest.raises(StateError, match="BatchDataset composition"):
        make(1).restore_state_global([state])


def test_stream_functions_resume_inside_their_groups(data: Path) -> None:
    """Repeat, a generator map (two outputs per sample), an iter-map (two samples per output)
    and grouped batching, saved at every batch: each restore continues exactly."""
    wc = el.WorkerConfig(rank=0, world_size=1, num_workers=0)

    def make() -> el.SavableLoader:
        repeated = el.RepeatDataset(val(el, data, wc), repeats=1.5, worker_config=wc)
        doubled = el.MapDataset(repeated, twice, stateless_map_fn=True, worker_config=wc)
        paired = el.IterMapDataset(doubled, joined_pairs, stateless_iter_fn=True, worker_config=wc)
        return el.get_savable_loader(
            el.GroupBatchDataset(paired, 4, by_parity, el.generic_batch, worker_config=wc)
        )

    loader = make()
    assert len(loader) == 90  # Energon counts a grouped batching by the items it groups
    reference = assert_loader_resumes(make, 22, range(23))
    assert len({key for keys, _, _ in reference for key in keys}) == 60


def test_epochize_continues_the_stream_across_passes(data: Path) -> None:
    wc = el.WorkerConfig(rank=0, world_size=1, num_workers=0)

    def make() -> el.SavableLoader:
        batched = el.BatchDataset(_train(data, wc, None), 4, el.generic_batch, worker_config=wc)
        return el.get_savable_loader(el.EpochizeDataset(batched, 5, worker_config=wc))

    loader = make()
    first = [b.__key__ for b in loader]
    state = loader.save_state_rank()
    second = [b.__key__ for b in loader]
    assert len(loader) == 5 and len(first) == len(second) == 5
    assert not {k for b in first for k in b} & {k for b in second for k in b}
    resumed = make()
    resumed.restore_state_rank(state)  # saved between the passes: the second pass follows
    assert [b.__key__ for b in resumed] == second
    assert_loader_resumes(make, 5, [0, 2, 4])


def test_a_new_sample_from_map_fn_gets_its_inputs_restore_key(data: Path) -> None:
    """Energon sets a mapped sample's restore key; a buffer above must be able to save it."""
    wc = el.WorkerConfig(rank=0, world_size=1, num_workers=0)

    def fresh(s: Any) -> Any:
        return el.TextSample(__key__=s.__key__, __restore_key__=(), text=s.caption.upper())

    def make() -> el.SavableLoader:
        mapped = el.MapDataset(_train(data, wc, None), fresh, worker_config=wc)
        return el.get_savable_loader(el.ShuffleBufferDataset(mapped, 5, worker_config=wc))

    reference = assert_loader_resumes(make, 12, [0, 4, 9])
    assert all(key.startswith("SampleKey(") for _, key, _ in reference)


def test_wrappers_refuse_what_they_cannot_do(data: Path) -> None:
    wc = el.WorkerConfig(rank=0, world_size=1, num_workers=0)
    other = el.WorkerConfig(rank=0, world_size=1, num_workers=1)
    ds = _train(data, wc, None)
    with pytest.raises(ConfigError, match="worker_config"):
        el.MapDataset(ds, lambda s: s, worker_config=other)
    with pytest.raises(ConfigError, match="outermost"):
        el.MapDataset(el.EpochizeDataset(ds, 3, worker_config=wc), lambda s: s, worker_config=wc)
    with pytest.raises(ConfigError, match="weight"):
        el.BlendDataset((ds, 0), worker_config=wc)
    with pytest.raises(ConfigError, match="batch_size"):
        el.BatchDataset(ds, 0, el.generic_batch, worker_config=wc)
    loader = el.get_savable_loader(el.IterMapDataset(ds, pairs, worker_config=wc))
    item = next(iter(loader))
    with pytest.raises(StateError, match="stateless_iter_fn"):
        loader.restore_sample(item[0].__restore_key__)
