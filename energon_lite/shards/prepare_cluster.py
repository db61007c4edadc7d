"""Scanning shards in journaled batches: in local processes, or as tasks on a Ray cluster.

``executor="ray"`` (``energon-lite prepare --executor ray``) runs each batch of shards
(:mod:`energon_lite.shards.prepare_journal`) as a Ray task placed by Ray wherever a CPU is
free; each task reads its shards from the store itself (object storage for a cluster: the
tasks need the dataset's URL to be reachable where they run, and ``energon_lite`` installed
there). ``address`` is handed to ``ray.init(address=...)`` (``"auto"``, ``"ray://host:10001"``,
``"host:6379"``); without one, ``ray.init()`` connects to ``RAY_ADDRESS`` if set, else starts
a local Ray with ``num_workers`` CPUs, shut down when the prepare ends. A Ray already
initialised in the process is used as it is. The driver's storage variables (AWS_*,
AZURE_STORAGE_*, GOOGLE_*, STORAGE_EMULATOR_HOST, MSC_CONFIG, ENERGON_LITE_*) travel with
each task, so a task reaches the store as the driver does.

At most ``2 * num_workers`` batches are in flight. Each batch's scans go to the journal as
they come back; when a batch fails, the batches still running are waited for (and
journaled) before the error is raised, so the next prepare re-scans only what was not done.
The driver alone writes the indexes and ``.nv-meta``, once every scan is in.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from tqdm import tqdm

from energon_lite.errors import ConfigError
from energon_lite.shards.prepare_journal import Journal, batches
from energon_lite.shards.tar_index import ShardScan, scan_shard
from energon_lite.storage import StoragePath
from energon_lite.storage.clients import STORAGE_ENV
from energon_lite.storage.ops import downloaded

EXECUTORS = ("process", "ray")
TASK_TIMEOUT = float(os.environ.get("ENERGON_LITE_PREPARE_TASK_TIMEOUT", "3600"))  # s per batch
_ENV_PREFIXES = ("ENERGON_LITE_",)


def task_env() -> dict[str, str]:
    """The driver's variables a task needs to reach the store as the driver does."""
    names = set(STORAGE_ENV) | {k for k in os.environ if k.startswith(_ENV_PREFIXES)}
    return {k: os.environ[k] for k in sorted(names) if k in os.environ}


def scan_batch(root: StoragePath, names: Sequence[str], env: dict[str, str] | None = None) -> list[ShardScan]:  # fmt: skip
    """Scan ``names`` under ``root`` (one sequential GET per remote shard)."""
    if env:
        os.environ.update(env)
    scans = []
    for name in names:
        with downloaded(root / name) as local:
            scans.append(scan_shard(local, display_name=str(root / name)))
    return scans


def scan_resumable(
    root: StoragePath,
    shards: Sequence[str],
    *,
    executor: str = "process",
    num_workers: int = 1,
    address: str | None = None,
    progress: bool = True,
) -> tuple[list[ShardScan], int]:
    """Every shard's scan, in order, and how many came from the journal."""
    if executor not in EXECUTORS:
        raise ConfigError(f"--executor {executor!r}: allowed {list(EXECUTORS)}")
    journal = Journal(root)
    groups = batches(shards)
    results: dict[int, list[ShardScan]] = {}
    for index, names in enumerate(groups):
        saved = journal.load(index, names)
        if saved is not None:
            results[index] = saved
    resumed = sum(len(groups[i]) for i in results)
    todo = [(i, names) for i, names in enumerate(groups) if i not in results]
    bar = tqdm(total=len(shards), initial=resumed, desc="indexing shards", unit="shard",
               disable=not progress)  # fmt: skip

    def done(index: int, scans: list[ShardScan]) -> None:
        journal.save(index, groups[index], scans)
        results[index] = scans
        bar.update(len(scans))

    try:
        if executor == "ray":
            _run_ray(root, todo, num_workers, address, done)
        else:
            _run_processes(root, todo, num_workers, done)
    finally:
        bar.close()
    return [scan for i in range(len(groups)) for scan in results[i]], resumed


def _drain(
    running: dict[Any, int],
    pending: list[tuple[int, list[str]]],
    submit: Callable[[list[str]], Any],
    limit: int,
    wait_one: Callable[[list[Any]], list[Any]],
    result: Callable[[Any], list[ShardScan]],
    done: Callable[[int, list[ShardScan]], None],
) -> None:
    """Keep ``limit`` batches running; journal each result; on a failure, finish (and
    journal) the batches in flight, submit no more, then raise the first error."""
    error: BaseException | None = None
    while pending or running:
        while pending and error is None and len(running) < limit:
            index, names = pending.pop(0)
            running[submit(names)] = index
        if not running:
            break
        for handle in wait_one(list(running)):
            index = running.pop(handle)
            try:
                scans = result(handle)
            except Exception as exc:
                error = error or exc
                continue
            done(index, scans)
    if error is not None:
        raise error


def _run_processes(root: StoragePath, todo: list[tuple[int, list[str]]], num_workers: int,
                   done: Callable[[int, list[ShardScan]], None]) -> None:  # fmt: skip
    if num_workers <= 1:
        for index, names in todo:
            done(index, scan_batch(root, names))
        return
    with ProcessPoolExecutor(max_workers=num_workers) as pool:

        def wait_one(handles: list[Future[list[ShardScan]]]) -> list[Any]:
            finished, _ = wait(handles, timeout=TASK_TIMEOUT, return_when=FIRST_COMPLETED)
            if not finished:
                raise TimeoutError(f"no batch of shards finished within {TASK_TIMEOUT:g} s")
            return list(finished)

        _drain({}, list(todo), lambda names: pool.submit(scan_batch, root, names),
               2 * num_workers, wait_one, lambda f: f.result(), done)  # fmt: skip


def _run_ray(root: StoragePath, todo: list[tuple[int, list[str]]], num_workers: int,
             address: str | None, done: Callable[[int, list[ShardScan]], None]) -> None:  # fmt: skip
    try:
        import ray
    except ImportError:
        raise ConfigError("--executor ray needs Ray: pip install 'energon-lite[ray]'") from None
    started = False
    if not ray.is_initialized():
        local = address is None and not os.environ.get("RAY_ADDRESS")
        options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if local:
            options["num_cpus"] = max(1, num_workers)
        ray.init(address=address, **options)
        started = True
    try:
        task = ray.remote(num_cpus=1, max_retries=2)(scan_batch)
        env = task_env()
        workers = max(
            1, num_workers if num_workers > 1 else int(ray.cluster_resources().get("CPU", 1))
        )

        def wait_one(handles: list[Any]) -> list[Any]:
            finished, _ = ray.wait(handles, num_returns=1, timeout=TASK_TIMEOUT)
            if not finished:
                raise TimeoutError(f"no batch of shards finished within {TASK_TIMEOUT:g} s")
            return list(finished)

        def result(handle: Any) -> list[ShardScan]:
            try:
                return list(ray.get(handle))
            except ray.exceptions.RayTaskError as exc:
                cause = getattr(exc, "cause", None)
                raise (cause if isinstance(cause, Exception) else exc) from None

        _drain({}, list(todo), lambda names: task.remote(root, names, env), 2 * workers,
               wait_one, result, done)  # fmt: skip
    finally:
        if started:
            ray.shutdown()
