"""One prepare per dataset folder at a time, and no temporaries left by killed ones.

``prepare_lock(root)`` holds an exclusive ``fcntl.flock`` on ``<root>/.nv-meta.lock`` (the
kernel drops it when the holder dies, so a killed prepare never leaves the folder locked) and
removes the file on release. A second prepare on the folder fails at once with
:class:`FolderLockedError` naming the holder's process id. Temporaries carry the writer's
process id (``.tmp-<pid>``); :func:`clean_stale_temporaries` deletes those whose process is
gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from energon_lite.errors import ConfigError
from energon_lite.shards.meta import META_DIR
from energon_lite.storage.stale import is_stale_temporary

LOCK_NAME = f"{META_DIR}.lock"


class FolderLockedError(ConfigError):
    """Another process is preparing the same folder."""


@contextlib.contextmanager
def prepare_lock(root: Path) -> Iterator[None]:
    path = root / LOCK_NAME
    for _ in range(100):  # the file may be unlinked by a releasing holder between open and lock
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise FolderLockedError(
                f"{root} is locked by another prepare (process {holder}, lock file {path}); "
                "wait for it to finish, then run prepare again"
            ) from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    else:
        raise FolderLockedError(f"{path}: could not take the lock; another prepare is running")
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)


def clean_stale_temporaries(root: Path) -> list[Path]:
    """Delete stale ``.nv-meta.*`` folders and ``*.tar.idx.tmp*`` files; return them."""
    removed = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        for name in list(dirnames):
            if name.startswith(META_DIR + ".") and is_stale_temporary(name):
                shutil.rmtree(here / name, ignore_errors=True)
                removed.append(here / name)
        dirnames[:] = [d for d in dirnames if not d.startswith(META_DIR)]
        for name in filenames:
            if ".tar.idx." in name and is_stale_temporary(name):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(here / name)
                removed.append(here / name)
        if here == root:
            meta = root / META_DIR
            if meta.is_dir():
                for item in meta.iterdir():
                    if item.is_file() and is_stale_temporary(item.name):
                        item.unlink(missing_ok=True)
                        removed.append(item)
    return removed
