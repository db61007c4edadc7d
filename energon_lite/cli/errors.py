"""How the ``energon-lite`` command reports errors: one line, one prefix, exit status 1.

Every error - a usage mistake, a path that does not exist, one of energon_lite's own errors,
an OS error, or an unexpected exception - prints ``energon-lite CMD: error: ...`` on stderr
and exits with status 1, as Energon's command does. Tracebacks are for bugs only, and shown
with ``ENERGON_LITE_TRACEBACK=1``. A reader that stops early (``energon-lite ... | head``) is
not an error: the command stops writing and exits 0, quietly.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path
from typing import NoReturn

from energon_lite.errors import EnergonLiteError
from energon_lite.storage import is_url

PATH_COMMANDS = ("info", "preview", "lint")


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush into the closed pipe
    does not print "Exception ignored ... BrokenPipeError"."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout replaced by an object without a descriptor
        pass


class Parser(argparse.ArgumentParser):
    """Usage mistakes exit with status 1, like every other error of the command."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def _close_bars() -> None:
    """Close the progress bars an error interrupted, so that each ends its line before the
    error's (left open, tqdm prints a bar's last line at exit, after the message)."""
    std = sys.modules.get("tqdm.std")
    if std is not None:
        for bar in list(getattr(std.tqdm, "_instances", ())):
            bar.close()


def run_reporting_errors(args: argparse.Namespace) -> int:
    """``args.fn(args)``, with every error reported as one line and exit status 1."""
    prefix = f"energon-lite {args.command}: error:"
    try:
        # a remote path (s3://, msc://, http(s)://) is checked when the dataset opens
        if args.command in PATH_COMMANDS and not is_url(args.path) and not Path(args.path).exists():
            raise FileNotFoundError(
                2, "no such file or directory (the path does not exist)", args.path
            )
        try:
            code = int(args.fn(args))
        except BaseException:
            _close_bars()
            raise
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except BrokenPipeError:  # `... | head` read what it wanted: stop writing, quietly
        _silence_stdout()
        return 0
    except SystemExit as exc:  # our argument checks exit with a message
        if exc.code is None or isinstance(exc.code, int):
            raise
        print(f"{prefix} {exc.code}", file=sys.stderr)
    except EnergonLiteError as exc:
        print(f"{prefix} {exc}", file=sys.stderr)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"{prefix} {where}{exc.strerror or exc}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"{prefix} interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if os.environ.get("ENERGON_LITE_TRACEBACK") == "1":
            traceback.print_exc()
        print(
            f"{prefix} unexpected {type(exc).__name__}: {exc} (set ENERGON_LITE_TRACEBACK=1 "
            "to see where; please report it)",
            file=sys.stderr,
        )
    return 1
