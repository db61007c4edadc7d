"""The one door to torch's DataLoader internals: every private name it reads exists on the
installed torch, a torch without one is refused loudly (naming torch's version and the
name), and no other module of the package reads torch's private names."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from energon_lite.loader import torch_iter
from energon_lite.loader.torch_iter import TorchInternalsError, WorkerPool, check_iterator

PACKAGE = Path(__file__).resolve().parent.parent / "energon_lite"


class Counting(IterableDataset):
    def __iter__(self) -> Iterator[int]:
        info = torch.utils.data.get_worker_info()
        first = 0 if info is None else info.id * 100
        return iter(range(first, first + 3))


def test_every_private_name_it_reads_exists_on_this_torch() -> None:
    # the adapter reads no private name that it does not list (and check)
    source = Path(torch_iter.__file__).read_text(encoding="utf-8")
    read = set(re.findall(r"\.(_[a-z]\w*)", source)) - {"_iterator", "_missing"}
    assert read <= set(torch_iter.PRIVATE_NAMES), read - set(torch_iter.PRIVATE_NAMES)
    torch_iter.check_torch.cache_clear()
    torch_iter.check_torch()  # the module-level names
    for (module, name), _ in torch_iter.MODULE_NAMES.items():
        assert hasattr(module, name), f"torch {torch.__version__}: {module.__name__}.{name}"
    # the iterator's fields exist only once a pool runs: a real one, with two workers
    pool = WorkerPool(DataLoader(Counting(), batch_size=None, num_workers=2), watched=True)
    try:
        check_iterator(pool._iterator)
        assert sorted(pool) == [0, 1, 2, 100, 101, 102]
    finally:
        pool.close()
    assert all(not process.is_alive() for process in pool.processes)


def test_a_profiler_sees_the_range_torch_opens_for_each_batch_only_when_it_is_on() -> None:
    # the pool hands batches out without torch's record_function range unless a profiler
    # is on: then each batch is inside its range, as with torch's own next()
    pool = WorkerPool(DataLoader(Counting(), batch_size=None, num_workers=2), watched=True)
    try:
        first = next(pool)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            got = [next(pool), next(pool)]
        names = [event.name for event in prof.events()]
        rest = list(pool)
    finally:
        pool.close()
    assert [first, *got, *rest] == [0, 100, 1, 101, 2, 102]  # torch's round robin
    assert sum("DataLoader" in name for name in names) == 2, names


def test_a_torch_without_a_name_is_refused_naming_the_version_and_the_name() -> None:
    # torch's iterator without workers has none of the pool's fields
    single = iter(DataLoader(range(3), batch_size=None, num_workers=0))
    with pytest.raises(
        TorchInternalsError,
        match=r"^torch 9\.9\.0: _SingleProcessDataLoaderIter \(torch's DataLoader iterator\) "
        r"has no '_workers' \(the worker processes\)",
    ):
        check_iterator(single, version="9.9.0")


def test_no_other_module_reads_torch_private_names() -> None:
    fields = "|".join(re.escape(name) for name in torch_iter.ITERATOR_FIELDS)
    private = re.compile(
        rf"torch\.utils\.data\._|from torch\.utils\.data import _|"
        rf"_MultiProcessingDataLoaderIter|signal_handling|MP_STATUS_CHECK_INTERVAL|"
        rf"\.({fields})\b|[\"']({fields})[\"']"
    )
    found = [
        f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "torch_iter.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if private.search(line)
    ]
    assert found == []
