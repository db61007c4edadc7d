"""Temporary files of processes that are gone: written as ``x.tmp-<pid>`` (or ``x.old-<pid>``)
by a writer that renames them into place, left behind only when the writer was killed.

Shared by the node-local shard cache (``shard_cache.py``) and prepare's folder lock
(``shards/folder_lock.py``), which both clean such leftovers."""

from __future__ import annotations

import os
import re

_TEMP = re.compile(r"\.(?:tmp|old)(?:-(\d+))?$")


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one owned by another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale_temporary(name: str) -> bool:
    """``x.tmp-<pid>``/``x.old-<pid>`` of a process that is gone, or a pid-less ``x.tmp``."""
    match = _TEMP.search(name)
    if match is None:
        return False
    pid = match.group(1)
    return pid is None or (int(pid) != os.getpid() and not process_alive(int(pid)))
