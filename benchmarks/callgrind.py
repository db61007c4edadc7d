"""Instruction counts of marked phases of one process, by valgrind's callgrind, split by the
shared object (library) that executed them.

Instructions do not change with the machine's load or clock, so they settle questions that
CPU time on a shared machine cannot. The counted process calls ``mark()`` to end a phase:
under ``--dump-before=getloadavg`` callgrind writes the counts since the previous mark and
zeroes them, so each phase is counted alone (start-up and imports fall into the first phase
and are left out by whoever reads the phases). ``os.getloadavg`` is the marker because
nothing else in such a process calls libc's ``getloadavg``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

MARKER = "getloadavg"


READY, GO = "callgrind: ready", "CALLGRIND_GO_FILE"


def ready() -> None:
    """Called by the counted process once set up: instrumentation (off until now, so that
    imports run at a few times native speed instead of fifty) is switched on by ``phases``,
    which then creates the file this waits for."""
    go = os.environ.get(GO)
    if go is None:
        return
    print(READY, flush=True)
    while not os.path.exists(go):
        time.sleep(0.05)


def mark() -> None:
    """End the current phase (a no-op outside callgrind but for one cheap system call)."""
    os.getloadavg()


def _valgrind() -> None:
    if shutil.which("valgrind") is None:
        raise SystemExit("instruction counts need valgrind (Debian: apt-get install valgrind)")


def whole_process(script: str, args: Sequence[str], label: str) -> int:
    """The instructions ``python script args`` executes under callgrind from start to end,
    with a fixed ``PYTHONHASHSEED``; printed with ``label``. Start-up is left out by the
    caller, by counting the same command with and without the work."""
    import sys

    _valgrind()
    with tempfile.TemporaryDirectory() as folder:
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={folder}/cg.out"]
        cmd += [sys.executable, script, *args]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    found = re.findall(r"Collected : (\d+)", run.stderr)
    if run.returncode != 0 or not found:
        raise RuntimeError(f"{label} failed:\n{run.stderr[-3000:]}")
    print(f"{label}: {int(found[-1]):,} instructions", file=sys.stderr)
    return int(found[-1])


def phases(
    cmd: list[str],
    env: dict[str, str] | None = None,
    keep: Path | None = None,
    from_start: bool = False,
) -> tuple[str, list[Counter[str]]]:
    """Run ``cmd`` under callgrind; its stdout and, per phase in order (the part after the
    last mark included), the instructions executed by each shared object. ``keep``: a
    folder to leave the dumps in (``cg.out.PID.N``, one per phase) for ``callgrind_annotate``.

    ``from_start``: count from the interpreter's first instruction (start-up and imports
    are the first phase; ``ready()`` is not waited for). Only ``cmd``'s own process is
    counted: processes it forks (DataLoader workers) run under callgrind too, into files of
    their own that are left out."""
    _valgrind()
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary) if keep is None else keep
        folder.mkdir(parents=True, exist_ok=True)
        # one file per process (%p): a forked worker's dumps must not overwrite the parent's
        pattern, go = folder / "cg.out.%p", Path(temporary) / "go"
        with (folder / "stderr.txt").open("w+") as stderr:
            child = subprocess.Popen(
                ["valgrind", "--tool=callgrind", f"--instr-atstart={'yes' if from_start else 'no'}",
                 f"--dump-before={MARKER}", f"--callgrind-out-file={pattern}", *cmd],
                stdout=subprocess.PIPE, stderr=stderr, text=True,
                env={**(os.environ if env is None else env), GO: str(go)},
            )  # fmt: skip
            assert child.stdout is not None
            lines = []
            for line in child.stdout:
                if line.rstrip("\n") == READY:
                    subprocess.run(["callgrind_control", "-i", "on", str(child.pid)],
                                   check=True, capture_output=True, timeout=600)  # fmt: skip
                    go.touch()
                else:
                    lines.append(line)
            if child.wait() != 0:
                stderr.seek(0)
                raise RuntimeError(f"{cmd} failed under callgrind:\n{stderr.read()[-3000:]}")
        out = folder / f"cg.out.{child.pid}"  # valgrind runs the command in its own process
        dumps = sorted(folder.glob(f"{out.name}.*"), key=lambda p: int(p.suffix[1:]))
        return "".join(lines), [by_object(p) for p in [*dumps, out]]


_NAME = re.compile(r"\((\d+)\)(?: (.*))?")


def by_object(path: Path) -> Counter[str]:
    """Self instructions per shared object in one callgrind dump (the counts a function's
    calls pass on to other objects are counted there, not at the call)."""
    names: dict[str, str] = {}
    costs: Counter[str] = Counter()
    obj, after_call = "?", False

    def name(text: str) -> str:
        found = _NAME.fullmatch(text.strip())
        if found is None:
            return text.strip()  # uncompressed name
        if found.group(2) is not None:
            names[found.group(1)] = found.group(2)
        return names.get(found.group(1), "?")

    with path.open() as lines:
        for line in lines:
            head = line[:1]
            if head.isdigit() or head in "+-*":
                if after_call:
                    after_call = False  # the inclusive cost of the call just named
                    continue
                parts = line.split()
                if len(parts) > 1:
                    costs[obj] += int(parts[1])
            elif line.startswith("ob="):
                obj = name(line[3:])
            elif line.startswith("cob="):
                name(line[4:])  # may define a compressed name used later
            elif line.startswith("calls="):
                after_call = True
    return costs


def library(obj: str) -> str:
    """A shared object's path reduced to its library's name (``libavcodec``, ``python``...)."""
    base = os.path.basename(obj)
    for lib in ("libavcodec", "libswscale", "libavformat", "libavutil", "libx264"):
        if base.startswith(lib):
            return lib
    if base.startswith("python") or base.startswith("libpython"):
        return "python"
    if "/av/" in obj:
        return "PyAV"
    if "numpy" in obj:
        return "numpy"
    if "torchcodec" in obj:
        return "torchcodec"
    if "decord" in base:
        return "decord"
    if "torch" in obj or base.startswith("libc10"):
        return "torch"
    if base.startswith(("libc.", "libc-", "libm.", "libm-", "ld-linux", "libstdc++", "libgcc")):
        return "libc"
    return "other"
