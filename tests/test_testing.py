"""``energon_lite.testing`` catches the resume bugs it exists for, shown with broken stages;
and building a chain does no work until it starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from energon_lite import WorkerConfig, get_train_dataset
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.stages.base import Stage
from energon_lite.stages.blend_epochized import EpochizedBlend
from energon_lite.stages.reader import Reader
from energon_lite.testing import assert_stage_resumes, item_keys, make_reader


class ExtraAfterRestore(Stage):
    """Broken on purpose: after a restore it emits its last item once more at the end."""

    STATE_KEYS = ("last",)

    def __init__(self, source: Stage) -> None:
        self.source = source

    def next(self) -> Any:
        self._start_if_fresh()
        try:
            item = self.source.next()
        except StopIteration:
            if self._extra is None:
                raise
            item, self._extra = self._extra, None
            return item
        self._last = item["__key__"]
        return item

    def _reset(self) -> None:
        self._last, self._extra = "", None

    def _save(self) -> dict[str, Any]:
        return {"last": self._last}

    def _restore(self, state: dict[str, Any]) -> None:
        self._last = state["last"]
        self._extra = {"__key__": self._last, "__restore_key__": None} if self._last else None


class RekeyAfterRestore(Stage):
    """Broken on purpose: after a restore its items carry another restore key."""

    def __init__(self, source: Stage) -> None:
        self.source = source
        self._restored = False

    def next(self) -> Any:
        item = dict(self.source.next())
        if self._restored:
            item["__restore_key__"] = item["__restore_key__"]._replace(epoch=99)
        return item

    def _restore(self, state: dict[str, Any]) -> None:
        self._restored = True


@pytest.fixture
def dataset(train_ds: Path) -> PreparedDataset:
    return PreparedDataset(train_ds, "train")


def test_a_stage_that_adds_items_after_a_restore_is_caught(dataset: PreparedDataset) -> None:
    with pytest.raises(AssertionError, match=r"items after the restore, expected"):
        assert_stage_resumes(lambda: ExtraAfterRestore(make_reader(dataset)), None, every=40)


def test_a_stage_whose_restore_keys_change_after_a_restore_is_caught(
    dataset: PreparedDataset,
) -> None:
    def make() -> Stage:
        return RekeyAfterRestore(make_reader(dataset))

    # the same __key__s come back, so comparing keys alone passes ...
    assert_stage_resumes(make, None, every=40, key=item_keys)
    # ... the default identity compares restore keys and payloads too
    with pytest.raises(AssertionError, match=r"diverged at item"):
        assert_stage_resumes(make, None, every=40)


def test_a_state_whose_shape_drifts_is_caught(dataset: PreparedDataset) -> None:
    class Drifting(Stage):
        STATE_KEYS = ("count",)

        def __init__(self, source: Stage) -> None:
            self.source = source

        def next(self) -> Any:
            self._start_if_fresh()
            self._count += 1
            return self.source.next()

        def _reset(self) -> None:
            self._count = 0

        def _save(self) -> dict[str, Any]:
            return {"count": self._count if self._count < 3 else str(self._count)}

    with pytest.raises(AssertionError, match="shape changed after item 2"):
        assert_stage_resumes(lambda: Drifting(make_reader(dataset)), 10)


def test_a_chain_starts_once_and_builds_no_state_until_then(
    train_ds: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts = {"reader": 0, "plan": 0}
    reset, make_plan = Reader._reset, EpochizedBlend._make_plan

    def counted_reset(self: Reader) -> None:
        counts["reader"] += 1
        reset(self)

    def counted_plan(self: EpochizedBlend) -> None:
        counts["plan"] += 1
        make_plan(self)

    monkeypatch.setattr(Reader, "_reset", counted_reset)
    monkeypatch.setattr(EpochizedBlend, "_make_plan", counted_plan)
    yaml = train_ds.parent / "epochized.yaml"
    yaml.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        f"    blend_epochized:\n      - repetitions: 1.5\n        path: {train_ds}\n"
        f"      - repetitions: 0.5\n        path: {train_ds}\n"
    )
    dataset = get_train_dataset(
        yaml,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=4,
        shuffle_buffer_size=10,
        max_samples_per_sequence=10,
    )
    chain = dataset.pipeline.build(dataset.worker_config.slot(0))
    assert counts == {"reader": 0, "plan": 0}  # constructing the datasets and chain: no work
    chain.restore_state(None)
    assert counts == {"reader": 2, "plan": 1}  # one reset per reader, one epoch plan
    chain.next()
    chain.save_state()
    assert counts == {"reader": 2, "plan": 1}
