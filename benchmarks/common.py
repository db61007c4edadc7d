"""Helpers shared by the benchmarks: process-tree memory, medians and ratios, Markdown tables.

* ``TreeMemorySampler`` samples, in a background thread, the resident set size (RSS) summed
  over a process and all its descendants (DataLoader workers included) every 50 ms (the
  descendants are re-listed every 0.5 s) and keeps the peak.
  Pages shared between a parent and its forked workers are counted once per process, as
  ``ps`` would; that is an upper bound on what the tree really holds.
* ``run_child`` runs a command under that sampler and returns its output lines, its peak and
  the peak up to a marker line the child prints (to leave a later phase out of a figure).
* ``process_tree_cpu``: CPU seconds of this process and its workers.
* ``median``, ``ratio``, ``ab_order``: A/B alternation over rounds on a small noisy machine.
* ``markdown_table``, ``fmt_bytes``, ``fmt_num``: printing.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psutil

T = TypeVar("T")
STARTED_AT = "BENCH_STARTED_AT"  # run_child: the wall-clock time the child was started


class TreeMemorySampler:
    """Peak RSS summed over ``pid`` and its descendants, sampled every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float = 0.05, rescan_every: int = 10) -> None:
        self.pid = pid
        self.interval = interval
        self.rescan_every = rescan_every
        self.peak = 0
        self._processes: list[psutil.Process] = []
        self._samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-memory", daemon=True)

    def sample(self) -> int:
        """The current RSS of the tree in bytes (0 once the process is gone).

        Listing descendants reads /proc for every process on the machine (~3 ms of CPU), so
        the list is refreshed only every ``rescan_every`` samples; reading the RSS of known
        processes is cheap. This keeps the sampler's own load well under 1% of a core.
        """
        if self._samples % self.rescan_every == 0 or not self._processes:
            try:
                root = psutil.Process(self.pid)
                self._processes = [root, *root.children(recursive=True)]
            except psutil.Error:
                self._processes = []
                return 0
        self._samples += 1
        total = 0
        for process in self._processes:
            with contextlib.suppress(psutil.Error):  # a worker that exited meanwhile
                total += process.memory_info().rss
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.sample())
            self._stop.wait(self.interval)

    def start(self) -> TreeMemorySampler:
        self._thread.start()
        return self

    def stop(self) -> int:
        """Stop sampling; return the peak in bytes."""
        self._stop.set()
        self._thread.join()
        return self.peak

    def __enter__(self) -> TreeMemorySampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class ChildRun:
    """What ``run_child`` saw: output lines, exit status, peak tree RSS (bytes) and duration."""

    lines: list[str]
    returncode: int
    peak_rss: int
    peak_rss_at_mark: int | None
    seconds: float
    stderr: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def cache_bytecode(packages: Sequence[str] = ("energon_lite",)) -> dict[str, str]:
    """Write the bytecode caches of ``packages`` (those installed; nothing is imported) and
    return an environment for children that read and write such caches.

    A user's interpreter imports a package from its cached bytecode after the first run;
    a machine with ``PYTHONDONTWRITEBYTECODE=1`` (as the reference machine sets it) compiles
    every module from source in every process instead, which charges a loader with many
    modules (energon_lite imports about 110 of its own) for compiling them in each child
    (about a second on the reference machine) and makes "time to first batch" measure that.
    """
    import compileall
    import importlib.util

    for name in packages:
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:  # a dotted name whose parent package is not installed
            spec = None
        for folder in (spec.submodule_search_locations or []) if spec is not None else []:
            compileall.compile_dir(folder, quiet=1)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_child(
    cmd: Sequence[str],
    *,
    mark: str | None = None,
    interval: float = 0.05,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
) -> ChildRun:
    """Run ``cmd``, sampling its process tree's memory; ``mark`` snapshots the peak so far.

    When the child prints a line equal to ``mark`` the peak up to then is kept as
    ``peak_rss_at_mark`` (for instance the steady-state phase before a restore phase).
    """
    start = time.perf_counter()
    # the child can tell how long it has run, interpreter start and imports included
    env = {**(os.environ if env is None else env), STARTED_AT: repr(time.time())}
    process = subprocess.Popen(
        list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    sampler = TreeMemorySampler(process.pid, interval).start()
    stderr_chunks: list[str] = []
    reader = threading.Thread(
        target=lambda: stderr_chunks.append(process.stderr.read() if process.stderr else ""),
        daemon=True,
    )
    reader.start()
    lines: list[str] = []
    at_mark: int | None = None
    assert process.stdout is not None  # stdout=PIPE above
    for line in process.stdout:
        line = line.rstrip("\n")
        if mark is not None and line == mark and at_mark is None:
            at_mark = max(sampler.peak, sampler.sample())
        lines.append(line)
    process.wait(timeout=timeout)
    reader.join()
    peak = sampler.stop()
    return ChildRun(
        lines,
        process.returncode,
        peak,
        at_mark,
        time.perf_counter() - start,
        "".join(stderr_chunks),
    )


def process_tree_cpu(include_self: bool = True, system_only: bool = False) -> float:
    """CPU seconds (user + system; ``system_only``: the kernel's alone, e.g. page faults)
    used so far by this process (unless ``include_self`` is False) and all its descendants
    that are still alive (a loader's workers)."""
    me = psutil.Process()
    total = 0.0
    for process in [me, *me.children(recursive=True)][0 if include_self else 1 :]:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.system if system_only else times.user + times.system
    return total


def median(values: Sequence[float | None]) -> float | None:
    """Median of the values that are not None (None if there are none)."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None when either is missing or ``b`` is 0."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def ab_order(items: Sequence[T], round_index: int) -> list[T]:
    """The order to run ``items`` in round ``round_index``: rotated, and reversed every other
    round, so each item runs early and late, before and after each other item."""
    n = len(items)
    if n == 0:
        return []
    shift = (round_index // 2) % n
    rotated = list(items[shift:]) + list(items[:shift])
    return rotated if round_index % 2 == 0 else rotated[::-1]


def fmt_num(value: float | None, digits: int = 0, suffix: str = "") -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}{suffix}"


def fmt_bytes(value: float | None) -> str:
    if value is None:
        return "n/a"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KB", 1000)):
        if value >= size:
            return f"{value / size:,.1f} {unit}"
    return f"{value:,.0f} B"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub Markdown table; columns padded so it also reads well as plain text."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |"

    separator = "| " + " | ".join("-" * w for w in widths) + " |"
    return "\n".join([line(cells[0]), separator, *(line(r) for r in cells[1:])])
