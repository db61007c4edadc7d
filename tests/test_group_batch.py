"""GroupBatch stage: homogeneous per-bucket batches, shape buckets, synchronised ranks, resume."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from energon_lite import (
    ConfigError,
    Sample,
    SkipSample,
    StateError,
    TaskEncoder,
    WorkerConfig,
    get_savable_loader,
    get_train_dataset,
)
from energon_lite.flavors.video_text.buckets import (
    BucketConfig,
    BucketId,
    make_batch_group_criterion,
)
from energon_lite.stages.bucket_sync import choose_bucket
from energon_lite.task_encoder.packing import best_fit
from energon_lite.testing import assert_loader_resumes, assert_stage_resumes

NUM_SAMPLES = 200
SEED = 0


@dataclass
class Clip(Sample):
    index: int = 0
    tokens: torch.Tensor | None = None
    num_frames: int = 0
    height: int = 0
    width: int = 0


# Synthetic video shapes by sample index: images and videos, landscape and square, and
# shapes no bucket accepts (too small, or too few frames for a video bucket).
FRAMES = [1, 16, 20, 33, 8]
SIZES = [(256, 256), (240, 426), (512, 512), (720, 1280), (100, 100), (480, 854)]


def clip(sample: Any) -> Clip:
    index = int(sample.text.split(":")[0].split()[1])
    words = sample.text.split(":")[1].split()
    height, width = SIZES[index % len(SIZES)]
    return Clip.derive_from(
        sample,
        index=index,
        tokens=torch.tensor([len(w) for w in words]),
        num_frames=FRAMES[index % len(FRAMES)],
        height=height,
        width=width,
    )


class LengthBuckets(TaskEncoder):
    """Buckets by caption word count: short captions in 4s, long ones in 3s."""

    def encode_sample(self, sample: Any) -> Clip:
        return clip(sample)

    def batch_group_criterion(self, sample: Clip) -> tuple[Any, int]:
        if sample.index % 17 == 0:
            raise SkipSample()
        return ("long", 3) if len(sample.tokens) > 7 else ("short", 4)

    def batch(self, samples: list[Clip]) -> dict[str, Any]:
        keys = {self.batch_group_criterion(s)[0] for s in samples}
        return {
            "bucket": keys.pop() if len(keys) == 1 else keys,
            "index": [s.index for s in samples],
        }


BUCKETS = {
    "1:1": {256: {1: (1.0, 4), 16: (2.0, 2)}},
    "16:9": {"240x426": {1: (1.0, 4), 16: (1.0, 3), 32: (0.5, 2)}},
}


class ShapeBuckets(TaskEncoder):
    """Open-Sora style: each batch is resized to its bucket's (T, H, W) target. On torch's
    meta device (``device="meta"``, the default) the clips have a shape and no data: the
    shape check without the cost of filling hundreds of clips of up to 32x240x426 bytes in a
    resume test (the content is not the point); a loader with workers sends real ones."""

    def __init__(self, device: str = "meta") -> None:
        self.criterion = make_batch_group_criterion(BUCKETS, SEED)
        self.device = device

    def encode_sample(self, sample: Any) -> Clip:
        return clip(sample)

    def batch_group_criterion(self, sample: Clip) -> tuple[BucketId, int]:
        return self.criterion(sample)

    def batch(self, samples: list[Clip]) -> dict[str, Any]:
        # torch.stack refuses different shapes: a mixed batch cannot slip through.
        buckets = [self.criterion(s)[0] for s in samples]
        video = torch.stack(
            [torch.zeros(b.target, dtype=torch.uint8, device=self.device) for b in buckets]
        )
        return {"bucket": buckets[0], "video": video, "index": [s.index for s in samples]}


def dataset(root: Path, te: TaskEncoder, wc: WorkerConfig | None = None, **kwargs: Any) -> Any:
    options: dict[str, Any] = dict(
        batch_size=None, shuffle_buffer_size=8, max_samples_per_sequence=5
    )
    options.update(kwargs)
    return get_train_dataset(
        root, worker_config=wc or WorkerConfig(0, 1, 0), task_encoder=te, **options
    )


def batch_key(batch: dict[str, Any]) -> Any:
    return (
        list(batch["bucket"]) if isinstance(batch["bucket"], tuple) else batch["bucket"],
        batch["index"],
    )


@pytest.mark.parametrize("drop_last", [False, True])
def test_batches_are_homogeneous_and_of_their_bucket_size(text_ds: Path, drop_last: bool) -> None:
    te = LengthBuckets()
    batches = list(
        get_savable_loader(dataset(text_ds, te, repeat=False, batch_drop_last=drop_last))
    )
    sizes = {"long": 3, "short": 4}
    assert {b["bucket"] for b in batches} == {"long", "short"}  # a set would mean mixed keys
    full = [len(b["index"]) == sizes[b["bucket"]] for b in batches]
    # only the end-of-epoch leftovers (one per bucket at most) may be partial
    assert full.count(False) <= (0 if drop_last else 2) and all(full[: -2 or None])
    seen = Counter(i for b in batches for i in b["index"])
    assert set(seen.values()) == {1} and not any(i % 17 == 0 for i in seen)
    if not drop_last:
        assert len(seen) == NUM_SAMPLES - len(range(0, NUM_SAMPLES, 17))
    again = list(get_savable_loader(dataset(text_ds, te, repeat=False, batch_drop_last=drop_last)))
    assert [batch_key(b) for b in again] == [batch_key(b) for b in batches]


def test_bucket_config_batches_have_one_target_shape_and_its_batch_size(text_ds: Path) -> None:
    te = ShapeBuckets()
    batches = list(itertools.islice(get_savable_loader(dataset(text_ds, te)), 40))
    for batch in batches:
        bucket = batch["bucket"]
        assert batch["video"].shape == (bucket.batch_size, *bucket.target)
    assert len({b["bucket"] for b in batches}) >= 3
    # too small (100x100) and too short (8-frame video) samples are dropped, not batched
    indices = [i for b in batches for i in b["index"]]
    assert not any(SIZES[i % 6] == (100, 100) or FRAMES[i % 5] == 8 for i in indices)
    assert te.criterion.dropped > 0


def test_inconsistent_batch_size_for_a_key_is_an_error(text_ds: Path) -> None:
    class Flaky(LengthBuckets):
        def batch_group_criterion(self, sample: Clip) -> tuple[Any, int]:
            return "one", 2 + sample.index % 2

    with pytest.raises(ConfigError, match="batch sizes"):
        list(get_savable_loader(dataset(text_ds, Flaky())))


# --- synchronised buckets across ranks ------------------------------------------------


def sync_weights() -> dict[BucketId, float]:
    return BucketConfig(BUCKETS).weights()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_synchronised_mode_emits_the_same_bucket_on_all_ranks(
    text_ds: Path, num_workers: int
) -> None:
    weights = sync_weights()
    steps = 24
    per_rank = []
    for rank in range(2):
        wc = WorkerConfig(rank=rank, world_size=2, num_workers=num_workers)
        te = ShapeBuckets("cpu" if num_workers else "meta")
        ds = dataset(text_ds, te, wc, bucket_sync={"weights": weights})
        batches = list(itertools.islice(get_savable_loader(ds), steps))
        for batch in batches:
            assert batch["video"].shape == (batch["bucket"].batch_size, *batch["bucket"].target)
        per_rank.append([b["bucket"] for b in batches])
    assert per_rank[0] == per_rank[1]
    assert per_rank[0] == [choose_bucket(SEED, step, weights) for step in range(steps)]
    assert len(set(per_rank[0])) >= 3
    # the ranks read different samples: only the buckets are synchronised
    unsynced = [
        [
            b["bucket"]
            for b in itertools.islice(
                get_savable_loader(
                    dataset(
                        text_ds,
                        ShapeBuckets("cpu" if num_workers else "meta"),
                        WorkerConfig(r, 2, num_workers),
                    )
                ),
                steps,
            )
        ]
        for r in range(2)
    ]
    assert unsynced[0] != unsynced[1]


def test_synchronised_mode_option_errors(text_ds: Path) -> None:
    weights = sync_weights()
    with pytest.raises(ConfigError, match="overrides batch_group_criterion"):
        dataset(text_ds, TaskEncoder(), bucket_sync={"weights": weights}, batch_size=2)
    with pytest.raises(ConfigError, match="must be a dict with 'weights'"):
        dataset(text_ds, ShapeBuckets(), bucket_sync={"weight": weights})
    partial = dict(list(weights.items())[:2])
    with pytest.raises(ConfigError, match="has no weight"):
        list(
            itertools.islice(
                get_savable_loader(
                    dataset(text_ds, ShapeBuckets(), bucket_sync={"weights": partial})
                ),
                5,
            )
        )
    # a bucket the data never fills: the others pile up until max_buffered says why
    starved = {**{k: 1.0 for k in weights}, BucketId("x", 99, "1:1", 8, 8, 1): 1000.0}
    with pytest.raises(ConfigError, match="max_buffered=50"):
        list(
            itertools.islice(
                get_savable_loader(
                    dataset(
                        text_ds,
                        ShapeBuckets(),
                        bucket_sync={"weights": starved, "max_buffered": 50},
                    )
                ),
                5,
            )
        )


# --- exact resume ---------------------------------------------------------------------


class PackedBuckets(TaskEncoder):
    """Packing then grouping: packs of caption tokens, bucketed by their member count."""

    def preencode_sample(self, sample: Any) -> Clip:
        return clip(sample)

    def select_samples_to_pack(self, samples: list[Clip]) -> list[list[Clip]]:
        return best_fit(samples, 24, length=lambda s: len(s.tokens))

    def pack_selected_samples(self, samples: list[Clip]) -> Clip:
        tokens = torch.cat([s.tokens for s in samples])
        return Clip.derive_from(samples[0], index=samples[0].index, tokens=tokens)

    def batch_group_criterion(self, sample: Clip) -> tuple[Any, int]:
        return len(sample.__restore_key__.members), 2  # a PackKey of the member keys

    batch = LengthBuckets.batch


@pytest.mark.parametrize(
    ("te", "kwargs"),
    [
        (LengthBuckets, {"repeat": False}),
        (ShapeBuckets, {}),
        (ShapeBuckets, {"bucket_sync": {"weights": sync_weights()}}),
        (PackedBuckets, {"packing_buffer_size": 16}),
    ],
    ids=["finite", "shape-buckets", "synchronised", "packed"],
)
def test_chain_resumes_exactly(text_ds: Path, te: type, kwargs: dict[str, Any]) -> None:
    ds = dataset(text_ds, te(), **kwargs)
    keys = assert_stage_resumes(
        lambda: ds.pipeline.build(ds.worker_config.slot(0)),
        None if kwargs.get("repeat") is False else 40,
        every=2,
        key=batch_key,
    )
    assert len(keys) >= 20


def test_state_saves_restore_keys_not_bucket_keys(text_ds: Path) -> None:
    ds = dataset(text_ds, ShapeBuckets(), bucket_sync={"weights": sync_weights()})
    chain = ds.pipeline.build(ds.worker_config.slot(0))
    for _ in range(5):
        chain.next()
    state = chain.save_state()
    assert state["emitted"] == 5 and state["sync"] is True
    assert all(key[0] == "s" for bucket in state["buckets"] for key in bucket)
    unsynced = dataset(text_ds, ShapeBuckets())
    with pytest.raises(StateError, match="bucket_sync on"):
        unsynced.pipeline.build(unsynced.worker_config.slot(0)).restore_state(state)


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("sync", [False, True], ids=["per-rank", "synchronised"])
def test_loader_resumes_exactly(text_ds: Path, num_workers: int, sync: bool) -> None:
    extra = {"bucket_sync": {"weights": sync_weights()}} if sync else {}

    def make() -> Any:
        wc = WorkerConfig(1, 2, num_workers)
        te = ShapeBuckets("cpu" if num_workers else "meta")
        return get_savable_loader(dataset(text_ds, te, wc, **extra))

    keys = assert_loader_resumes(make, 20, [0, 3, 11], key=batch_key)
    assert len(keys) == 20
