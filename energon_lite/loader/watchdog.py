"""``Watchdog``: a thread in each worker process that says where the worker is stuck.

Every ``timeout / 4`` seconds it looks at the worker's main thread. The worker has made
progress when it handed out a batch (``beat()``) or when the line it is executing changed:
slow but moving data never fires. When neither happened for ``timeout`` seconds, it logs the
worker, the innermost stage on the stack, the key of the sample being worked on and the
stack, once per stall, then calls the ``callback`` if one is given (a
``WatchdogDataset``'s ``_watchdog_trigger``). The trainer raises for a stalled worker only
when asked to (``fail_on_timeout=True``: the loader's batch timeout).

With ``num_workers=0`` it watches the trainer's own thread. The loader pauses it while a
batch is out: the trainer's step is not the loader's stall, nor is a worker's wait for the
trainer to ask for its next batch. (A worker that never hands its batch over is the
trainer's to notice: :mod:`energon_lite.loader.healing`.)
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Callable
from types import FrameType
from typing import Any

from energon_lite.errors import logger


class Watchdog:
    def __init__(
        self,
        timeout: float,
        worker: int,
        initial_timeout: float | None = None,
        callback: Callable[[], Any] | None = None,
    ) -> None:
        self.timeout = timeout
        self.callback = callback
        self.paused = False
        self.initial_timeout = initial_timeout if initial_timeout is not None else 2 * timeout
        self.worker = worker
        self.beats = 0
        self.stalls = 0  # how many stalls were reported (for tests and stats)
        self._watched = threading.get_ident()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="energon_lite-watchdog", daemon=True)

    def start(self) -> Watchdog:
        self._thread.start()
        return self

    def beat(self) -> None:
        self.beats += 1

    def stop(self) -> None:
        self._stop.set()

    def pause(self) -> None:
        """Stop counting (a batch is out with the trainer) until ``resume``."""
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def _run(self) -> None:
        last_beats, last_line, since = self.beats, None, time.monotonic()
        limit, reported = self.initial_timeout, False
        while not self._stop.wait(min(self.timeout, limit) / 4):
            frame = sys._current_frames().get(self._watched)
            if frame is None:
                return
            line = (frame.f_code, frame.f_lineno)
            now = time.monotonic()
            if self.paused or self.beats != last_beats or line != last_line:
                if self.beats != last_beats:
                    limit = self.timeout  # after the first batch, the normal timeout
                last_beats, last_line, since, reported = self.beats, line, now, False
            elif not reported and now - since >= limit:
                reported = True
                self.stalls += 1
                self._report(frame, now - since)
                if self.callback is not None:
                    try:
                        self.callback()
                    except Exception:  # e.g. a trigger that raises: the run goes on here
                        logger.exception("worker %d: the watchdog's callback raised", self.worker)

    def _report(self, frame: FrameType, seconds: float) -> None:
        stage, key = where(frame)
        stack = "".join(traceback.format_stack(frame))
        logger.warning(
            "worker %d made no progress for %.0f s, in stage %s on sample %r; stack:\n%s",
            self.worker,
            seconds,
            stage or "(none)",
            key,
            stack,
        )


def where(frame: FrameType | None) -> tuple[str | None, Any]:
    """The innermost stage on the stack and the key of the innermost sample in its locals."""
    from energon_lite.stages.base import Stage

    stage, key = None, None
    while frame is not None and (stage is None or key is None):
        local = frame.f_locals
        if stage is None and isinstance(local.get("self"), Stage):
            stage = type(local["self"]).__name__
        if key is None:
            for value in local.values():
                found = (
                    value.get("__key__")
                    if isinstance(value, dict)
                    else getattr(value, "__key__", None)
                )
                if isinstance(found, str):
                    key = found
                    break
        frame = frame.f_back
    return stage, key
