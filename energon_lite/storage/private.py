"""Folders and files that only this user may plant: the caches every worker reads from.

Whoever can write a cache folder chooses what the run reads from it, so a cache folder is
made with mode 0700 and refused when another user owns it or others may write to it
(``private_folder``). Files inside are created with ``O_EXCL | O_NOFOLLOW`` (``create_new``):
a link planted at a temporary's name is removed, never followed, so a run (as root too)
never truncates or writes through it.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from energon_lite.errors import ConfigError


def private_folder(path: Path, hint: str = "choose another folder") -> Path:
    """``path`` (resolved), created with mode 0700 if missing; refused when another user
    owns it or others may write to it. ``hint``: how the user points the cache elsewhere."""
    path = Path(path)
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=False)
        os.chmod(path, 0o700)  # the umask may have narrowed it further; never wider
    except FileExistsError:
        pass
    resolved = path.resolve()
    info = os.stat(resolved)
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"cache folder {resolved} is not a folder; remove it or {hint}")
    if info.st_uid != os.getuid():
        raise ConfigError(
            f"cache folder {resolved} is owned by uid {info.st_uid}, not by this user "
            f"(uid {os.getuid()}): another user could plant entries there; remove it or {hint}"
        )
    if info.st_mode & 0o022:
        raise ConfigError(
            f"cache folder {resolved} has mode {stat.S_IMODE(info.st_mode):04o}: others may "
            f"write to it and plant entries; run `chmod 700 {resolved}` or {hint}"
        )
    return resolved


def create_new(path: Path, flags: int = os.O_RDWR, mode: int = 0o600) -> int:
    """A descriptor of ``path`` created anew, never through a link: whatever sits at that
    name (a dead process's temporary, a planted symlink) is removed first, once."""
    create = flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    try:
        return os.open(path, create, mode)
    except FileExistsError:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # unlinking a symlink removes the link, not its target
        return os.open(path, create, mode)


def write_new(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` whole: a new temporary (``create_new``) renamed into
    place; the temporary is removed when the write fails."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    fd = create_new(tmp, os.O_WRONLY)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
