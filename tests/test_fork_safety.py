"""Forked workers never free what the trainer's process made before the fork.

A DataLoader worker hung for good in CI: the trainer's process had decoded a video frame
itself and left it in a garbage cycle; the worker, a fork of it, collected the cycle, and
freeing the frame's scaler waited for swscale's slice threads, which exist only in the
trainer. Two guards: the loader's workers start with the trainer's objects out of their
garbage collector, and our decoder scales in one thread (as it decodes). Also here: a
module lock that a thread of the parent may hold at the fork is a new one in the child.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import pytest

from energon_lite.fork_hook import parents_objects_kept_from_children

av = pytest.importorskip("av")


class _Cycle:
    """A garbage cycle that says (over a pipe) in which process it was finalized."""

    def __init__(self, fd: int, payload: object = None) -> None:
        self.fd, self.payload, self.me = fd, payload, self

    def __del__(self) -> None:
        with contextlib.suppress(OSError):  # the test is over: its pipe is closed
            os.write(self.fd, f"{os.getpid()}\n".encode())


def _fork_and_collect(
    make_garbage: Callable[[], None], guard: AbstractContextManager[None], limit_s: float = 20.0
) -> bool:
    """Make garbage, fork (inside ``guard``), ``gc.collect()`` in the child: whether the
    child finished within ``limit_s`` (it is killed otherwise)."""
    # the child is to find this garbage only: an earlier test's (a frame scaled with
    # threads, in the same pytest process) would hang an unguarded child
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()  # the garbage must still be there at the fork
    try:
        make_garbage()
        with guard:
            pid = os.fork()
        if pid == 0:  # the child: collect, and leave without running anything else
            try:
                gc.collect()
            finally:
                os._exit(0)
    finally:
        if was_enabled:
            gc.enable()
    return _finished(pid, limit_s)


def _finished(pid: int, limit_s: float) -> bool:
    """Whether child ``pid`` ended within ``limit_s`` (it is killed otherwise)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return True
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return False


def _finalized_in(read_fd: int) -> set[int]:
    os.set_blocking(read_fd, False)
    try:
        return {int(line) for line in os.read(read_fd, 4096).split()}
    except BlockingIOError:
        return set()


@pytest.mark.parametrize("guarded", [True, False])
def test_a_child_never_collects_the_parents_garbage(guarded: bool) -> None:
    read_fd, write_fd = os.pipe()
    try:
        guard = parents_objects_kept_from_children() if guarded else nullcontext()
        assert _fork_and_collect(lambda: _Cycle(write_fd) and None, guard)
        in_child = _finalized_in(read_fd)
        gc.collect()  # the parent collects its own garbage, frozen for the fork only
        in_parent = _finalized_in(read_fd)
    finally:
        os.close(read_fd)
        os.close(write_fd)
    assert gc.get_freeze_count() == 0
    if guarded:
        assert in_child == set() and in_parent == {os.getpid()}
    else:  # what the guard prevents: the child runs the parent's finalizer
        assert len(in_child) == 1 and os.getpid() not in in_child


def _collectable(obj: object) -> bool:
    """Whether ``obj`` is in the collector's generations (not frozen)."""
    return any(o is obj for o in gc.get_objects())


def test_a_process_that_froze_objects_itself_keeps_them_frozen() -> None:
    early: list[object] = []
    gc.freeze()  # the process's own freeze
    try:
        late: list[object] = []
        with parents_objects_kept_from_children():
            assert _collectable(late)  # nothing more frozen
        assert not _collectable(early) and _collectable(late)  # nor anything unfrozen
    finally:
        gc.unfreeze()
    assert _collectable(early)


def test_our_decoder_scales_in_one_thread() -> None:
    """A frame our decoder scaled, and the decoder's scaler itself (kept over the frames of
    a decoder), can be freed in a process forked after they were used."""
    from energon_lite.av.rgb import Frames, RgbScaler
    from energon_lite.synth.av import make_video

    buffer = io.BytesIO()
    make_video(buffer, num_frames=2, width=320, height=240)
    buffer.seek(0)
    scaler = RgbScaler()  # as AVDecoder keeps one
    with av.open(buffer) as container:
        frame = next(container.decode(video=0))
    assert scaler.rgb(frame, (160, 120)).shape == (120, 160, 3)
    assert scaler.rgb(frame, None).shape == (240, 320, 3)  # the same scaler, set up anew
    into = Frames(1, 120, 160)  # and its own swscale context, kept as well
    scaler.into(frame, (160, 120), into, 0)
    held = [(frame, scaler)]
    del frame, scaler  # from here on only the cycle holds them
    read_fd, write_fd = os.pipe()
    try:
        finished = _fork_and_collect(lambda: _Cycle(write_fd, held.pop()) and None, nullcontext())
        freed = bool(_finalized_in(read_fd))
        gc.collect()
    finally:
        os.close(read_fd)
        os.close(write_fd)
    assert finished, "the child hung freeing a frame our decoder had scaled"
    assert freed


_TRAINER = """
import gc, io, sys
import av
from energon_lite import DefaultTaskEncoder, WorkerConfig, get_savable_loader, get_train_dataset
from energon_lite.synth.av import make_video

class Collecting(DefaultTaskEncoder):
    def encode_sample(self, sample):
        gc.collect()  # in the worker: collects whatever garbage it may
        return super().encode_sample(sample)

class Holder:
    pass

buffer = io.BytesIO()
make_video(buffer, num_frames=2, width=320, height=240)
buffer.seek(0)
with av.open(buffer) as container:
    frame = next(container.decode(video=0))
frame.to_ndarray(format="rgb24", width=160, height=120)  # the user's own scaling: threads
holder = Holder()
holder.frame, holder.me = frame, holder
del holder, frame
gc.disable()  # the cycle is still there when the workers fork
dataset = get_train_dataset(
    sys.argv[1], batch_size=4, worker_config=WorkerConfig(0, 1, 2),
    task_encoder=Collecting(), shuffle_buffer_size=None, max_samples_per_sequence=None,
)
loader = get_savable_loader(dataset)
print(sum(len(batch.__key__) for _, batch in zip(range(6), loader)))
"""


def test_loader_workers_survive_the_trainers_own_video_frames(
    train_ds: Path, tmp_path: Path
) -> None:
    script = tmp_path / "trainer.py"
    script.write_text(textwrap.dedent(_TRAINER))
    # its own session, so that a hung run's workers go with it
    process = subprocess.Popen(
        [sys.executable, str(script), str(train_ds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail("the loader's workers hung freeing the trainer's video frame")
    assert process.returncode == 0, err
    assert out.split() == ["24"]


def test_a_lock_the_parent_held_at_the_fork_does_not_block_the_childs_retry_counts() -> None:
    """The remote retry counters' lock: a parent thread (a shard prefetch) may hold it at the
    moment a worker forks."""
    from energon_lite.storage import retry, session

    with session().stats._lock:  # held across the fork, as by a thread of the trainer
        pid = os.fork()
        if pid == 0:
            try:
                retry.STATS.add("failures")
            finally:
                os._exit(0)
    assert _finished(pid, 20.0), "the child waited for the lock its parent held at the fork"
