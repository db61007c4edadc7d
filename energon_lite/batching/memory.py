"""Shared-memory batch buffers that a worker reuses once the trainer has let go of them.

A worker's batch travels to the trainer through shared memory. torch's collate (and ours
until this module) allocates a fresh segment for every batch, and the kernel hands out
fresh zeroed pages on first touch: for a 32 x 3 x 256 x 256 float batch (25 MB) that costs
about 22 ms of the 29 ms the stack takes, more than decoding a third of the batch.

So each worker keeps a few segments and writes each batch into a free one. "Free" is
decided by the trainer's process, where the batch lives on: every batch carries the
segments it was built in (:class:`Held`), and the loader keeps a weak reference with a
callback to each one's storage there. torch maps a received segment once per process and
hands every tensor over it the same storage object, which lives as long as any tensor or
view of it does; when the last one goes, the callback marks the segment free in a small flag
table in shared memory. The worker writes into it again only when, besides, no tensor in the worker refers
to it (a sample decoded into its batch's memory may still sit in a packing buffer). A batch
the trainer keeps (a list of batches, a pending asynchronous copy) keeps its segment busy;
the worker then allocates a fresh one, as before, once its ``slots`` are all busy.

Only tensors of at least :data:`MIN_BYTES` use the pool (page faults of small ones do not
matter). In the trainer's own process (``num_workers=0``) nothing changes.

The trainer maps each segment once. torch sends a shared tensor by passing its file
descriptor over a socket for every batch (a connection, an authentication round trip and a
fresh mapping of 25 MB whose pages then fault in again when the trainer reads them: about
2.7 ms of the trainer's CPU per W1 batch it reads). A worker sends a segment's descriptor with
the first batch built in it; later batches in the same segment name it by (pool, worker,
slot), and the trainer makes a new storage object over the mapping it already has
(:func:`_rebuild_mapped`), so the finalizer above still sees each batch's tensors go. The
mappings live as long as the pool object of the stream in the trainer's process.

That first descriptor travels over a Unix socket pair per worker that the pool opens in the
trainer's process before the workers fork (:meth:`BatchMemoryPool.reduce_segment` sends it,
:func:`_rebuild_received` takes it). torch's way, ``multiprocessing``'s resource sharer,
needs a listener thread in the worker to answer the trainer's connection and its
authentication round trips while the worker's main thread already decodes its next batch:
on two busy cores that held each worker's first batch back by 15-29 ms (11-19 ms this way).
A descriptor sent over the pair is in the trainer's socket before the batch that names it
is in its queue. Where the pair is not there (a worker started by ``spawn`` gets a pickled
pool without it) or the send fails, the descriptor goes torch's way as before
(:func:`_rebuild_first`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import mmap
import os
import socket
import weakref
from collections.abc import Iterator, Sequence
from multiprocessing.reduction import DupFd, ForkingPickler
from typing import Any

import numpy as np
import torch
import torch.multiprocessing
from torch.multiprocessing.reductions import reduce_storage as _torch_reduce_storage
from torch.multiprocessing.reductions import reduce_tensor as _torch_reduce_tensor

from energon_lite.batching.allocate import use_pool

MIN_BYTES = 256 * 1024
SPARE_SLOTS = 8  # segments held back for filling slabs, beyond ``slots``
_PAGE = 4096
_FREE, _BUSY = 0, 1
# how long the trainer waits for a segment's descriptor that a worker sent before the batch
# naming it: it is normally there already; a missing one means the worker failed mid-send
_RECEIVE_TIMEOUT_S = 60.0


class Held:
    """The segments one batch was built in: torch's worker id and ``[(slot, storage)]``.
    No ``pin_memory`` method, so torch's pin-memory thread passes it through untouched."""

    __slots__ = ("segments", "worker")

    def __init__(self, worker: int, segments: list[tuple[int, torch.UntypedStorage]]) -> None:
        self.worker, self.segments = worker, segments


class BatchMemoryPool:
    """Made by the loader for one stream; pickled to the workers with the dataset view.

    ``flags[worker, slot]`` is 1 while the trainer's process may still read that segment.
    Only the worker sets it to 1 (when it takes a free segment), only the trainer's
    finalizers set it back to 0, so the two never race on one flag.
    """

    def __init__(self, num_workers: int, slots: int) -> None:
        self.slots = slots
        self.flags = torch.zeros((num_workers, slots + SPARE_SLOTS), dtype=torch.uint8)
        self.flags.share_memory_()
        # the same memory as a NumPy array: setting one flag through it costs a fraction of
        # a torch ``__setitem__`` (one per batch on each side)
        self._flag_array = self.flags.numpy()
        # cleared by the trainer if torch ever hands a batch's tensors a storage other than
        # the one received for its segment (the finalizers would then free segments early)
        self.enabled = torch.ones(1, dtype=torch.uint8).share_memory_()
        self._checked = False
        self._worker: int | None = None
        self._segments: list[torch.UntypedStorage] = []
        self._taken: list[tuple[int, torch.UntypedStorage]] = []
        self._held_back: list[tuple[int, torch.UntypedStorage]] = []  # hold_back()
        self._sent: set[int] = set()  # worker: slots whose descriptor the trainer has
        # trainer: (worker, slot) -> the segment's mapping, for the stream's lifetime
        self._mapped: dict[tuple[int, int], mmap.mmap] = {}
        # per worker (trainer's end, worker's end): the first descriptor of each segment;
        # forked workers inherit them (None in a pickled copy: torch's way is used there)
        self._channels: list[tuple[socket.socket, socket.socket]] | None = _socket_pairs(
            num_workers
        )
        self._channel: socket.socket | None = None  # worker: its own end
        self._arrived: dict[tuple[int, int], int] = {}  # trainer: descriptors read ahead
        # trainer: (worker, slot) -> a weak reference to the storage of the batch received
        # in that segment, whose callback frees the segment (:meth:`received`)
        self._watched: dict[tuple[int, int], weakref.ref[torch.UntypedStorage]] = {}
        self.by_channel = 0  # trainer: segments whose descriptor came over the pair
        if self._channels is not None:
            weakref.finalize(self, _close_pairs, self._channels, self._arrived)
        self.token = os.urandom(8).hex()
        _POOLS[self.token] = self

    def __getstate__(self) -> dict[str, Any]:
        return {
            "slots": self.slots,
            "flags": self.flags,
            "enabled": self.enabled,
            "token": self.token,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.slots, self.flags, self.enabled = state["slots"], state["flags"], state["enabled"]
        self._flag_array = self.flags.numpy()
        self.token = state["token"]
        self._checked, self._worker, self._segments, self._taken = True, None, [], []
        self._held_back = []
        self._sent, self._mapped = set(), {}
        self._channels, self._channel, self._arrived, self.by_channel = None, None, {}, 0

    # worker side ------------------------------------------------------------------------

    def activate(self, worker: int) -> None:
        """Make this the pool of the calling worker process (``worker``: torch's worker id)."""
        self._worker = worker
        use_pool(self)  # batch_tensor allocates the worker's batches from here
        if self._channels is not None:
            # keep this worker's end; the trainer's ends and other workers' ends are theirs
            for index, (trainer_end, worker_end) in enumerate(self._channels):
                trainer_end.close()
                if index == worker:
                    self._channel = worker_end
                else:
                    worker_end.close()
            self._channels = None
        if torch.multiprocessing.get_sharing_strategy() == "file_descriptor":
            # the worker's queue pickles storages with _reduce_storage from now on
            ForkingPickler.register(torch.UntypedStorage, functools.partial(_reduce_storage, self))
            # and tensors over them in one call (torch's way, for any other tensor)
            ForkingPickler.register(torch.Tensor, functools.partial(_reduce_tensor, self))

    def reduce_segment(self, storage: torch.UntypedStorage) -> tuple[Any, tuple[Any, ...]] | None:
        """How to send ``storage`` when it is one of this worker's segments: with its file
        descriptor the first time, by name after that; None for any other storage."""
        slot = next((i for i, seg in enumerate(self._segments) if seg is storage), None)
        if slot is None:
            return None
        if slot in self._sent:
            return (_rebuild_mapped, (self.token, self._worker, slot))
        fd, size = storage._share_fd_cpu_()
        self._sent.add(slot)
        if self._channel is not None:
            try:
                socket.send_fds(self._channel, [slot.to_bytes(4, "little")], [fd])
            except OSError:
                self._channel = None  # e.g. the trainer's end is gone: torch's way from now
            else:
                return (_rebuild_received, (self.token, self._worker, slot, size))
        return (_rebuild_first, (self.token, self._worker, slot, DupFd(fd), size))

    def take(self, nbytes: int) -> torch.UntypedStorage | None:
        """A free segment of at least ``nbytes`` (not more than twice that), or None.

        Segments held back for a filling slab (:meth:`hold_back`) do not count against
        ``slots`` (up to :data:`SPARE_SLOTS` of them). When every slot has a segment and
        none that is free fits (batches of several sizes: one per bucket), a free one of
        another size is replaced by one of this size, which later batches of it reuse."""
        assert self._worker is not None
        if not self.enabled[0]:
            return None
        row = self._flag_array[self._worker]
        other = None  # a free segment of another size
        for slot, segment in enumerate(self._segments):
            if row[slot] != _FREE or not _only_pool_uses(segment):
                continue
            if nbytes <= segment.nbytes() <= 2 * nbytes:
                return self._hand_out(slot, segment)
            other = slot if other is None else other
        size = -(-nbytes // _PAGE) * _PAGE
        if len(self._segments) < self.slots + min(len(self._held_back), SPARE_SLOTS):
            self._segments.append(torch.UntypedStorage._new_shared(size))
            return self._hand_out(len(self._segments) - 1, self._segments[-1])
        if other is None:
            return None
        # the trainer let go of it (free) and holds no batch in it: its next batch in this
        # slot sends the new segment's descriptor, which replaces the old mapping there
        self._segments[other] = torch.UntypedStorage._new_shared(size)
        self._sent.discard(other)
        return self._hand_out(other, self._segments[other])

    def empty(self, like: torch.Tensor, shape: Sequence[int]) -> torch.Tensor | None:
        """An uninitialised tensor over a free segment of this worker's, or None (a small
        tensor, not on the CPU, or every segment still in use)."""
        if like.device.type != "cpu":
            return None
        numel = math.prod(shape)
        nbytes = numel * like.element_size()
        if nbytes < MIN_BYTES:
            return None
        segment = self.take(nbytes)
        if segment is None:
            return None
        return torch.empty(0, dtype=like.dtype).set_(segment)[:numel].view(tuple(shape))

    def _hand_out(self, slot: int, segment: torch.UntypedStorage) -> torch.UntypedStorage:
        assert self._worker is not None
        self._flag_array[self._worker, slot] = _BUSY
        self._taken.append((slot, segment))
        return segment

    def hold_back(self, tensor: torch.Tensor) -> None:
        """Keep ``tensor``'s segment (taken for it by :meth:`empty`) out of the batches that
        go out until :meth:`let_travel`: a bucket's slab fills while other buckets' batches
        are made (``batching/group_slab.py``), and travels with its own."""
        _move(self._taken, self._held_back, tensor)

    def let_travel(self, tensor: torch.Tensor) -> None:
        """``tensor``'s held-back segment travels with the next batch collected."""
        _move(self._held_back, self._taken, tensor)

    def held_nothing(self, worker: int) -> Held:
        """What travels with a batch built outside the pool (not in a worker process)."""
        return Held(worker, [])

    def collect(self) -> Held:
        """The segments taken since the last call: they travel with the batch just made."""
        assert self._worker is not None
        taken, self._taken = self._taken, []
        return Held(self._worker, taken)

    # trainer side -----------------------------------------------------------------------

    def receive_fd(self, worker: int, slot: int) -> int:
        """The descriptor worker ``worker`` sent for its segment ``slot`` over its pair."""
        if self._channels is None:
            raise RuntimeError("batch memory: this pool's descriptor channels are closed")
        channel = self._channels[worker][0]
        channel.settimeout(_RECEIVE_TIMEOUT_S)
        while (worker, slot) not in self._arrived:
            try:
                message, fds, _, _ = socket.recv_fds(channel, 4, 1)
            except TimeoutError:
                raise RuntimeError(
                    f"batch memory: worker {worker} named segment {slot} but its descriptor "
                    f"did not arrive within {_RECEIVE_TIMEOUT_S:.0f} s"
                ) from None
            if not fds:
                raise RuntimeError(f"batch memory: worker {worker} sent no descriptor")
            self._arrived[(worker, int.from_bytes(message, "little"))] = fds[0]
        self.by_channel += 1
        return self._arrived.pop((worker, slot))

    def received(self, batch: Any, held: Held) -> None:
        """Free each segment of a received batch once nothing in this process uses it."""
        if held.segments and not self._checked:
            self._checked = True
            if not _shares_storages(batch, held):
                self.enabled[0] = 0  # never free these, nor reuse any segment from now on
                held.segments = []
        watched, flags, worker = self._watched, self._flag_array, held.worker
        for slot, storage in held.segments:
            # a plain weak reference kept by the pool, not weakref.finalize (a Python object,
            # a registry entry and an exit hook per batch): the same call when it goes
            watched[(worker, slot)] = weakref.ref(
                storage, functools.partial(_release, watched, flags, worker, slot)
            )
        held.segments = []


def _move(
    source: list[tuple[int, torch.UntypedStorage]],
    target: list[tuple[int, torch.UntypedStorage]],
    tensor: torch.Tensor,
) -> None:
    """Move the entry of ``tensor``'s segment from ``source`` to ``target`` (if there)."""
    address = tensor.untyped_storage().data_ptr()
    for index, entry in enumerate(source):
        if entry[1].data_ptr() == address:
            target.append(source.pop(index))
            return


def _shares_storages(batch: Any, held: Held) -> bool:
    """Whether every tensor of ``batch`` over a held segment uses that segment's storage
    object itself (what the finalizers rely on), checked on a stream's first such batch."""
    by_address = {storage.data_ptr(): storage for _, storage in held.segments}
    for tensor in _tensors(batch, 4):
        storage = tensor.untyped_storage()
        segment = by_address.get(storage.data_ptr())
        if segment is not None and segment is not storage:
            return False
    return True


def _tensors(value: Any, depth: int) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif depth == 0 or isinstance(value, (str, bytes)):
        return
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item, depth - 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item, depth - 1)
    elif dataclasses.is_dataclass(value):
        for field in dataclasses.fields(value):
            yield from _tensors(getattr(value, field.name, None), depth - 1)


_USE_COUNT = getattr(torch._C, "_storage_Use_Count", None)


def _only_pool_uses(segment: torch.UntypedStorage) -> bool:
    """Whether no tensor of this worker refers to ``segment`` any more: a sample decoded into a
    batch's memory (``energon_lite.batching.slab``) may wait in a packing or grouping buffer after
    its batch went out, and user code may keep a batch. Without torch's use count (a private
    function) a segment is never reused: fresh memory, as without the pool."""
    return _USE_COUNT is not None and _USE_COUNT(segment._cdata) == 1


def _release(
    watched: dict[tuple[int, int], Any], flags: np.ndarray, worker: int, slot: int, _: Any
) -> None:
    """The last tensor over a received segment went: the worker may write into it again."""
    watched.pop((worker, slot), None)
    flags[worker, slot] = _FREE


# the trainer's pools by token (a pool goes with its stream): process-global because unpickling
# calls the rebuild functions with the pickled arguments only, and those cannot hold a pool
_POOLS: weakref.WeakValueDictionary[str, BatchMemoryPool] = weakref.WeakValueDictionary()


def _reduce_storage(
    pool: BatchMemoryPool, storage: torch.UntypedStorage
) -> tuple[Any, tuple[Any, ...]]:
    """A worker's pickling of storages: ``pool``'s segments as
    :meth:`BatchMemoryPool.reduce_segment` says, everything else as torch does."""
    reduced = pool.reduce_segment(storage)
    return _torch_reduce_storage(storage) if reduced is None else reduced


def _reduce_tensor(pool: BatchMemoryPool, tensor: torch.Tensor) -> tuple[Any, tuple[Any, ...]]:
    """A worker's pickling of tensors: one over a segment of ``pool``, as a plain tensor
    (torch's own reducer sends the same fields), rebuilt in the trainer by one call
    (:func:`_tensor_over`) instead of torch's (the tensor's class, a typed storage over the
    segment, its dtype and ``Size`` looked up and built there, a tenth of what the trainer
    spends unpickling a batch); every other tensor as torch sends it."""
    if (
        type(tensor) is torch.Tensor
        and not tensor.requires_grad
        and tensor.layout == torch.strided
        and tensor.device.type == "cpu"
        and not tensor.is_conj()
        and not tensor.is_neg()
        and tensor._backward_hooks is None
    ):
        storage = tensor.untyped_storage()
        if any(segment is storage for segment in pool._segments):
            dtype = _DTYPE_NAMES.get(tensor.dtype)
            if dtype is not None:
                size, stride = tuple(tensor.size()), tensor.stride()
                return (_tensor_over, (storage, dtype, size, stride, tensor.storage_offset()))
    return _torch_reduce_tensor(tensor)


def _tensor_over(
    storage: torch.UntypedStorage, dtype: str, size: tuple[int, ...], stride: tuple[int, ...],
    offset: int,
) -> torch.Tensor:  # fmt: skip
    """Trainer side: the tensor of :func:`_reduce_tensor` over the storage received for it
    (what torch's ``rebuild_tensor`` makes of the same fields)."""
    return torch.empty(0, dtype=_DTYPES[dtype]).set_(storage, offset, size, stride)


_DTYPES = {name: value for name, value in vars(torch).items() if isinstance(value, torch.dtype)}
_DTYPE_NAMES = {value: name for name, value in reversed(_DTYPES.items())}


def _rebuild_first(
    token: str, worker: int, slot: int, fd_handle: Any, size: int
) -> torch.UntypedStorage:
    """Trainer side: map a segment received for the first time (its descriptor through
    ``multiprocessing``'s resource sharer) and keep the mapping."""
    return _map_first(_POOLS.get(token), worker, slot, fd_handle.detach(), size)


def _rebuild_received(token: str, worker: int, slot: int, size: int) -> torch.UntypedStorage:
    """Trainer side: the same, the descriptor read from the worker's socket pair."""
    pool = _POOLS.get(token)
    if pool is None:
        raise RuntimeError(
            f"batch memory: worker {worker} sent a batch of a stream this process no longer has"
        )
    return _map_first(pool, worker, slot, pool.receive_fd(worker, slot), size)


def _map_first(
    pool: BatchMemoryPool | None, worker: int, slot: int, fd: int, size: int
) -> torch.UntypedStorage:
    """Map ``fd`` (closed here) and keep the mapping in ``pool`` (None: the stream is gone)."""
    try:
        mapped = mmap.mmap(fd, size)
    finally:
        os.close(fd)
    if pool is not None:
        pool._mapped[(worker, slot)] = mapped
    return _storage_over(mapped)


def _rebuild_mapped(token: str, worker: int, slot: int) -> torch.UntypedStorage:
    """Trainer side: a new storage object over a segment mapped before."""
    pool = _POOLS.get(token)
    mapped = None if pool is None else pool._mapped.get((worker, slot))
    if mapped is None:
        raise RuntimeError(
            f"batch memory: worker {worker} sent a batch in segment {slot} of a stream this "
            "process has no mapping of (the stream ended, or its first batch there was lost)"
        )
    return _storage_over(mapped)


def _socket_pairs(count: int) -> list[tuple[socket.socket, socket.socket]] | None:
    """``count`` connected Unix datagram socket pairs, or None where there are none."""
    if not hasattr(socket, "AF_UNIX") or not hasattr(socket, "send_fds"):
        return None
    return [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(count)]


def _close_pairs(
    pairs: list[tuple[socket.socket, socket.socket]], arrived: dict[tuple[int, int], int]
) -> None:
    """A trainer's pool is gone: close its socket pairs and descriptors nobody took."""
    for pair in pairs:
        for end in pair:
            end.close()
    for fd in arrived.values():
        os.close(fd)
    arrived.clear()


def _storage_over(mapped: mmap.mmap) -> torch.UntypedStorage:
    """A storage object of its own over ``mapped`` (it keeps the mapping alive)."""
    return torch.frombuffer(mapped, dtype=torch.uint8).untyped_storage()
