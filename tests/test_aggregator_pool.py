"""``energon_lite.flavors.webdataset.aggregator_pool``: forked workers stream items to one
aggregator in batches, as Energon's ``AggregatorPool`` (the oracle) does."""

from __future__ import annotations

from typing import Any

import pytest

from energon_lite.flavors.webdataset.aggregator_pool import AggregatorPool, BaseAggregator


def produce(task: list[int]) -> Any:
    yield from task


def produce_or_fail(task: list[int]) -> Any:
    if task == [13]:
        raise ValueError("task 13")
    yield from task


def _collector(base: type) -> Any:
    class Collector(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            self.events: list[Any] = []

        def on_start(self, aggregator_pool: Any) -> None:
            self.events.append("start")

        def on_item(self, items: list[int], aggregator_pool: Any) -> None:
            self.events.append(list(items))

        def on_finish(self, aggregator_pool: Any) -> None:
            self.events.append("finish")

        def get_final_result_data(self) -> list[Any]:
            return self.events

    return Collector()


def _run(pool_type: type, base: type, workers: int, batch_size: int) -> list[Any]:
    pool = pool_type(
        num_workers=workers,
        user_produce_data=produce,
        aggregator=_collector(base),
        batch_size=batch_size,
    )
    for task in ([1, 2, 3], [4, 5], [], [6, 7, 8, 9, 10]):
        pool.submit_task(task)
    return pool.process()


@pytest.mark.parametrize("batch_size", [1, 2, 4])
def test_batches_as_energon(batch_size: int) -> None:
    energon = pytest.importorskip("megatron.energon.flavors.webdataset.aggregator_pool")
    ours = _run(AggregatorPool, BaseAggregator, 1, batch_size)
    assert ours == _run(energon.AggregatorPool, energon.BaseAggregator, 1, batch_size)
    assert ours[0] == "start" and ours[-1] == "finish"
    assert [x for batch in ours[1:-1] for x in batch] == list(range(1, 11))
    assert all(len(batch) <= batch_size for batch in ours[1:-1])


def test_several_workers_deliver_every_item_once() -> None:
    events = _run(AggregatorPool, BaseAggregator, 3, 2)
    assert sorted(x for batch in events[1:-1] for x in batch) == list(range(1, 11))


def test_a_failing_producer_stops_the_pool() -> None:
    pool = AggregatorPool(
        num_workers=2, user_produce_data=produce_or_fail, aggregator=_collector(BaseAggregator)
    )
    for task in ([1], [13], [2]):
        pool.submit_task(task)
    with pytest.raises(RuntimeError, match="exited with code 1"):
        pool.process()


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="batch_size=0"):
        AggregatorPool(1, produce, _collector(BaseAggregator), batch_size=0)
