"""A worker's state as the bytes it sends with each batch, read by the trainer only when asked.

Every batch carries its worker's state, so that the trainer can save any step; but a trainer
saves every few hundred or thousand steps, and unpickling each batch's state cost it more
than the rest of the batch's Python objects (186k instructions per batch of the W1 chain,
5.8k per sample: about 55% of what the trainer spends unpickling a batch). So the worker
pickles the state apart from the batch (:class:`StateSender`): torch's queue carries it as a
``bytes`` object, which the trainer's unpickling copies without looking inside. The trainer
keeps those bytes (:class:`SentStates`) and decodes them only when something reads the
states: a save, a new pass or a healing restart (which start workers from them), the mix
report.

What travels is what :mod:`energon_lite.resume.state_delta` makes: the changes since the
state sent before, or the state whole. One byte in front says which. Changes must be applied
in order to the state before them, so the trainer keeps, per worker, the last whole state
sent and every change since; a whole state drops everything before it. To keep that list
short, the worker sends the state whole again once the changes it sent since the last whole
one add up to as many bytes as that one had, or after :data:`MAX_CHANGES` changes, whichever
comes first: the trainer holds at most about twice a whole state's bytes per worker, a save
decodes at most ``MAX_CHANGES + 1`` of them per worker, and the worker pickles at most twice
the bytes that changes alone would be. A chain whose state never travels as changes (buffers
of 128 keys or fewer, no blend of lazily saved sources) sends it whole every batch, and the
trainer holds one ``bytes`` per worker and decodes nothing until a save.

The trainer also decodes a worker's list itself when it grows past ``MAX_CHANGES + 1``
entries (a worker that kept sending changes), so its memory stays flat whatever it is sent.
"""

from __future__ import annotations

import pickle
from typing import Any

from energon_lite.resume.state_delta import unchanged_marked, with_unchanged

MAX_CHANGES = 255  # a worker sends its state whole at least every 256 batches
_WHOLE, _CHANGES = b"W", b"C"  # the first byte of what a worker sends
_WHOLE_BYTE = _WHOLE[0]


def encoded(state: Any, whole: bool) -> bytes:
    """``state`` (whole, or as :func:`unchanged_marked` marked it) as a worker sends it."""
    return (_WHOLE if whole else _CHANGES) + pickle.dumps(state, pickle.HIGHEST_PROTOCOL)


def is_whole(sent: bytes) -> bool:
    """Whether ``sent`` (from :func:`encoded`) is a whole state, which needs none before it."""
    return sent[0] == _WHOLE_BYTE


def decoded(sent: bytes) -> Any:
    """What :func:`encoded` was given (whole, or the changes still marked)."""
    return pickle.loads(memoryview(sent)[1:])


class StateSender:
    """A worker's side: each state it saves, as the bytes to send with its batch."""

    def __init__(self) -> None:
        self._last: Any = None  # the state sent before (None: nothing sent yet)
        self._whole_bytes = 0  # the size of the last state sent whole
        self._changes_bytes = 0  # and of the changes sent since
        self._changes = 0

    def __call__(self, state: Any) -> bytes:
        last, self._last = self._last, state
        marked = state
        if (
            last is not None
            and self._changes < MAX_CHANGES
            and self._changes_bytes < self._whole_bytes
        ):
            marked = unchanged_marked(last, state)
        if marked is state:  # nothing marked: the state travels whole
            sent = encoded(state, whole=True)
            self._whole_bytes, self._changes_bytes, self._changes = len(sent), 0, 0
        else:
            sent = encoded(marked, whole=False)
            self._changes_bytes += len(sent)
            self._changes += 1
        return sent


class SentStates:
    """The trainer's side: per worker the state of the last batch received, kept as sent
    and decoded when :meth:`states` is read. A state received as an object (no worker
    processes: it never travelled) is kept as it is."""

    def __init__(self, states: list[Any]) -> None:
        self._states = states  # per worker, decoded up to the sent bytes below
        self._sent: list[list[bytes]] = [[] for _ in states]  # per worker, to apply in order

    def __len__(self) -> int:
        return len(self._states)

    def received(self, worker: int, state: Any) -> None:
        """Worker ``worker``'s state came with a batch (bytes from :class:`StateSender`, or
        the state itself)."""
        if type(state) is not bytes:
            self._sent[worker].clear()
            self._states[worker] = state
            return
        sent = self._sent[worker]
        if is_whole(state):
            sent.clear()
        elif len(sent) > MAX_CHANGES:
            self._decode(worker)
        sent.append(state)

    def states(self) -> list[Any]:
        """Per worker the whole state of the last batch received (None before its first)."""
        for worker, sent in enumerate(self._sent):
            if sent:
                self._decode(worker)
        return self._states

    def pending(self, worker: int) -> int:
        """How many sent states of ``worker`` are kept undecoded."""
        return len(self._sent[worker])

    def _decode(self, worker: int) -> None:
        sent = self._sent[worker]
        state = self._states[worker]
        for data in sent:  # a whole state ignores the one before (with_unchanged)
            state = with_unchanged(state, decoded(data))
        sent.clear()
        self._states[worker] = state
