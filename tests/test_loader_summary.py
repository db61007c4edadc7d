"""The execution summary: each stage's CPU and share from ``stats()``, and a bottleneck line
that tells data from the training step and names the stage, with its advice."""

from __future__ import annotations

import time

import pytest
from conftest import make_dataset

from energon_lite import (
    CaptioningSample,
    TaskEncoder,
    WorkerConfig,
    get_savable_loader,
    get_train_dataset,
)
from energon_lite.loader.stats_report import hint
from energon_lite.loader.summary import execution_summary, verdict


class SlowHook(TaskEncoder):
    """A per-sample hook that sleeps: it is the bottleneck whatever the machine."""

    def encode_sample(self, sample: CaptioningSample) -> CaptioningSample:
        time.sleep(0.02)
        return sample


@pytest.fixture(scope="module")
def stats(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = make_dataset(tmp_path_factory.mktemp("summary") / "captions", 60, 20)
    dataset = get_train_dataset(
        root,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=4,
        shuffle_buffer_size=8,
        max_samples_per_sequence=10,
        task_encoder=SlowHook(),
    )
    loader = get_savable_loader(dataset, stats=True)
    for step, _ in enumerate(loader):
        if step == 5:
            break
    lines = loader.execution_summary().splitlines()
    assert lines == execution_summary(loader.stats(), 0)[: len(lines)]
    return loader.stats()


def test_a_row_per_stage_and_shares_that_add_up(stats: dict) -> None:
    lines = execution_summary(stats, 0)
    assert lines[0].startswith("execution summary: ") and "6 batches" in lines[0]
    rows = lines[1:-2]
    assert len(rows) == len(stats["stages"]) + 1 and rows[-1].lstrip().startswith("other")
    shares = [float(row.rsplit(None, 1)[-1].rstrip("%")) for row in rows]
    assert sum(shares) == pytest.approx(100, abs=0.5)
    seconds = [float(row.split()[-3]) for row in rows]
    expected = [s["time_s"] for s in stats["stages"]] + [stats["other"]["time_s"]]
    assert seconds == pytest.approx(expected, abs=0.006)


def test_data_bound_names_the_stage_and_its_advice(stats: dict) -> None:
    lines = execution_summary(stats, 0)
    assert verdict(stats) == "data"  # a loop that does nothing but take batches
    assert lines[-2].startswith("bottleneck: data (the trainer waited")
    assert "encode_sample takes" in lines[-2]  # the sleeping hook: >= 20 ms of 24 ms a sample
    assert lines[-1] == f"hint: {hint(stats, 0)}"
    assert "move the per-sample work" in lines[-1] or "move per-sample work" in lines[-1]


def test_a_loader_that_keeps_up_points_at_the_step(stats: dict) -> None:
    keeps_up = {**stats, "wait_fraction": 0.01}
    assert verdict(keeps_up) == "step"
    lines = execution_summary(keeps_up, 2)
    assert lines[-2].startswith("bottleneck: the training step (the trainer waited only 1%")
    assert lines[-1] == "hint: nothing to tune in the loader; make the step faster"
