"""Where a process tree's memory is: PSS per kind of mapping, from ``/proc/PID/smaps``.

``breakdown(pids, pool_ranges)`` sums the proportional set size (shared pages divided
among the processes that map them, so the sum over a tree counts every page once) of
every mapping of every process, by kind:

* ``pool file`` - energon_lite's shared decoded pool (``/dev/shm/energon_lite_pool_*``);
* ``decoded pool (anon)`` - anonymous memory inside ``pool_ranges`` (address ranges of the
  decode-everything loader's numpy arrays, inherited copy-on-write by forked workers; a
  mapping partly inside them is split by the bytes inside);
* ``batches (torch shm)`` - torch's shared-memory tensors (``/dev/shm/torch_*``, memfds):
  batches collated in a worker and sent to the main process;
* ``heap (anon)`` - every other anonymous mapping: malloc arenas, numpy/PIL temporaries,
  Python objects, torch's CPU allocator;
* ``libraries`` - ``.so`` files; ``other files`` - everything else (the Python binary,
  mapped data files, stacks, vdso).

Linux only (the benchmarks that use it run there).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Sequence

KINDS = (
    "heap (anon)",
    "decoded pool (anon)",
    "pool file",
    "batches (torch shm)",
    "libraries",
    "other files",
)
_HEADER = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$")


def _kind(path: str) -> str:
    if "energon_lite_pool_" in path:
        return "pool file"
    if "/torch_" in path or (path.startswith("/memfd:") and "torch" in path):
        return "batches (torch shm)"
    if not path or path.startswith("[heap]") or path.startswith("[anon"):
        return "heap (anon)"
    if ".so" in path:
        return "libraries"
    return "other files"


def _overlap(lo: int, hi: int, ranges: Sequence[tuple[int, int]]) -> int:
    return sum(max(0, min(hi, b) - max(lo, a)) for a, b in ranges)


def process_breakdown(pid: int, pool_ranges: Sequence[tuple[int, int]] = ()) -> dict[str, int]:
    """PSS bytes of one process by kind (all zeros if it has exited)."""
    out = dict.fromkeys(KINDS, 0)
    lo = hi = 0
    kind = "other files"
    with contextlib.suppress(OSError), open(f"/proc/{pid}/smaps") as f:
        for line in f:
            m = _HEADER.match(line)
            if m:
                lo, hi = int(m.group(1), 16), int(m.group(2), 16)
                kind = _kind(m.group(3))
                continue
            if line.startswith("Pss:"):
                pss = int(line.split()[1]) * 1024
                if kind == "heap (anon)" and pool_ranges:
                    inside = _overlap(lo, hi, pool_ranges)
                    share = pss * inside // max(1, hi - lo)
                    out["decoded pool (anon)"] += share
                    pss -= share
                out[kind] += pss
    return out


def breakdown(pids: Iterable[int], pool_ranges: Sequence[tuple[int, int]] = ()) -> dict[str, int]:
    """PSS bytes of several processes by kind, summed (see the module docstring)."""
    total = dict.fromkeys(KINDS, 0)
    for pid in pids:
        for kind, value in process_breakdown(pid, pool_ranges).items():
            total[kind] += value
    return total


def torch_shm_bytes(pids: Iterable[int]) -> int:
    """Bytes of torch shared-memory segments alive in these processes, each counted once.

    A batch a worker has sent and the main process has not yet touched is in no one's PSS
    (the worker has unmapped it; the main process has mapped it but faulted no page in), yet
    its pages are RAM: segments are found through both the mappings and the open file
    descriptors (the queue passes them as descriptors) and counted once each, at full size.
    """
    sizes: dict[int, int] = {}
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and "/torch_" in parts[5]:
                    lo, hi = (int(x, 16) for x in parts[0].split("-"))
                    inode = int(parts[4])
                    sizes[inode] = max(sizes.get(inode, 0), hi - lo)
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if "/torch_" in os.readlink(f"/proc/{pid}/fd/{fd}"):
                        st = os.stat(f"/proc/{pid}/fd/{fd}")
                        sizes[st.st_ino] = max(sizes.get(st.st_ino, 0), st.st_size)
    return sum(sizes.values())
