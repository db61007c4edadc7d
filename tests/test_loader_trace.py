"""The loader's trace: Chrome trace-event JSON whose stage calls nest, whose own times add up
to ``stats()``, bounded in size, one file per rank that ``merge_traces`` joins."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import make_dataset

from energon_lite import (
    CaptioningSample,
    TaskEncoder,
    WorkerConfig,
    get_savable_loader,
    get_train_dataset,
)
from energon_lite.errors import ConfigError
from energon_lite.loader.stats_report import label
from energon_lite.loader.trace import merge_traces

EPS_US = 0.01  # the file's microseconds are floats of nanosecond clocks


class Upper(TaskEncoder):
    """A per-sample hook: its own row inside decode."""

    def encode_sample(self, sample: CaptioningSample) -> CaptioningSample:
        sample.caption = sample.caption.upper()
        return sample


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("trace") / "captions", 160, 20)


def _loader(path: Path, workers: int, rank: int = 0, world: int = 1):
    dataset = get_train_dataset(
        path,
        worker_config=WorkerConfig(rank=rank, world_size=world, num_workers=workers),
        batch_size=8,
        shuffle_buffer_size=12,
        max_samples_per_sequence=10,
        task_encoder=Upper(),
    )
    return get_savable_loader(dataset)


def _run(path: Path, out: Path, workers: int, batches: int, **trace) -> tuple[dict, dict]:
    loader = _loader(path, workers)
    loader.start_trace(**trace)
    try:
        for step, _ in enumerate(loader):
            if step == batches - 1:
                break
        written = loader.write_trace(out)
        stats = loader.stats()
    finally:
        loader.close()
    return json.loads(written.read_text()), stats


def _own_times(events: list[dict]) -> dict[str, float]:
    """Each name's own time (duration less its direct children's), checking that the events
    of each thread nest: a call lies inside the one that encloses it, or after it."""
    own: dict[str, float] = defaultdict(float)
    by_thread: dict[int, list[dict]] = defaultdict(list)
    for event in events:
        by_thread[event["tid"]].append(event)
    for thread in by_thread.values():
        thread.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[dict] = []
        for event in thread:
            while stack and event["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - EPS_US:
                stack.pop()
            if stack:
                parent = stack[-1]
                end, parent_end = event["ts"] + event["dur"], parent["ts"] + parent["dur"]
                assert end <= parent_end + EPS_US, f"{event} overlaps {parent} without nesting"
                own[parent["name"]] -= event["dur"]
            own[event["name"]] += event["dur"]
            stack.append(event)
    return own


def test_trace_nests_and_adds_up_to_the_stats(dataset_path: Path, tmp_path: Path) -> None:
    trace, stats = _run(dataset_path, tmp_path / "rank0.json", workers=2, batches=10)
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    names = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert names == {0: "trainer", 1: "worker 0", 2: "worker 1"}
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in events} == {0} and trace["otherData"]["dropped"] == {}
    own = _own_times(events)
    for stage in stats["stages"]:  # read, shuffle, decode, encode_sample, batch
        assert own[label(stage)] / 1e6 == pytest.approx(stage["time_s"], rel=1e-4, abs=1e-5)
    assert {"send", "wait", "receive"} <= set(own)
    trainer = [e for e in events if e["tid"] == 0]
    assert [e["name"] for e in trainer] == ["wait", "receive"] * 10
    waited = sum(e["dur"] for e in trainer if e["name"] == "wait") / 1e6
    handed = sum(e["dur"] for e in trainer) / 1e6
    assert waited <= stats["wait_s"] <= handed + 1e-3
    # the batches each worker made: its batch stage's events
    batch = label(next(s for s in stats["stages"] if s["name"] == "Batch"))
    made = defaultdict(int)
    for e in events:
        made[e["tid"]] += e["name"] == batch
    assert made[1] + made[2] == 10 and made[1] == made[2] == 5


def test_trace_is_bounded_and_says_what_it_left_out(dataset_path: Path, tmp_path: Path) -> None:
    trace, stats = _run(dataset_path, tmp_path / "small.json", workers=2, batches=6, max_events=20)
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    per_thread = defaultdict(int)
    for e in events:
        per_thread[e["tid"]] += 1
    assert max(per_thread.values()) <= 20 and per_thread[0] == 12  # 6 waits, 6 receipts
    dropped = trace["otherData"]["dropped"]
    assert dropped["worker 0"] > 0 and dropped["worker 1"] > 0 and "trainer" not in dropped
    # every call of the received batches is either in the file or counted as left out
    calls = sum(s["items_out"] for s in stats["stages"] if not s["inside"])
    calls += sum(s["items_out"] for s in stats["stages"] if s["inside"])
    sends = stats["batches"]
    kept = sum(n for tid, n in per_thread.items() if tid > 0)
    assert kept + dropped["worker 0"] + dropped["worker 1"] >= calls + sends - 2 * 8


def test_ranks_merge_into_one_trace(dataset_path: Path, tmp_path: Path) -> None:
    files = []
    for rank in (0, 1):
        loader = _loader(dataset_path, workers=0, rank=rank, world=2)
        loader.start_trace()
        for step, _ in enumerate(loader):
            if step == 2:
                break
        files.append(loader.write_trace(tmp_path / f"rank{rank}.json"))
        loader.close()
    merged = json.loads(merge_traces(files, tmp_path / "all.json").read_text())
    assert {e["pid"] for e in merged["traceEvents"]} == {0, 1}
    assert merged["otherData"]["ranks"] == [0, 1]
    spans = [e for e in merged["traceEvents"] if e["ph"] == "X"]
    rank0_end = max(e["ts"] + e["dur"] for e in spans if e["pid"] == 0)
    assert min(e["ts"] for e in spans if e["pid"] == 1) > rank0_end  # rank 1 ran after rank 0
    with pytest.raises(ConfigError, match="rank 0 again"):
        merge_traces([files[0], files[0]], tmp_path / "twice.json")


def test_trace_starts_before_the_workers(dataset_path: Path, tmp_path: Path) -> None:
    loader = _loader(dataset_path, workers=0)
    with pytest.raises(ConfigError, match="start_trace"):
        loader.write_trace(tmp_path / "none.json")
    next(iter(loader))
    with pytest.raises(ConfigError, match="before the first batch"):
        loader.start_trace()
    loader.close()
    with pytest.raises(ConfigError, match="max_events=0"):
        loader.start_trace(max_events=0)
