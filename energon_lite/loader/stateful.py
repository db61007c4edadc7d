"""``state_dict()`` / ``load_state_dict()``: the loader as torch's ``Stateful``, for trainers.

Trainers checkpoint what has these two methods by themselves: torch's distributed checkpoint
(DCP, ``dcp.save({"dataloader": loader})``), torchtitan's checkpointer, Lightning's
``Trainer`` (the train loader's state) and Accelerate's ``register_for_checkpointing``. They
are written over the public ``save_state_rank`` / ``save_state_global`` /
``restore_state_rank`` / ``restore_state_global``; nothing here knows the state's insides.

The form, the same on every rank (a few KB per rank):

* ``state_dict()`` gathers every data-parallel rank's ``save_state_rank()`` (a collective:
  every rank calls it, as trainers do). DCP keeps one copy of a key that every rank saves,
  so a per-rank value under one key would give every rank rank 0's state; the gathered list
  is the same on all ranks, and a load on another number of ranks finds every old rank's
  state to redistribute (``restore_state_global``) without being told the old world size.
* Each rank's state is the loader state in the project's msgpack codec, as ``bytes``. DCP
  flattens nested dicts and lists of dicts into keys, and a load fills only the keys that a
  fresh loader's ``state_dict()`` has: those must not depend on the saved layout or
  progress. Every value here is a leaf to DCP (a string, an integer, a list of integers or
  of bytes), so the keys are fixed. The form survives ``torch.save`` +
  ``torch.load(weights_only=True)`` and DCP alike.
* ``step`` counts the batches delivered since the run began (``loader.step``), carried
  across restores.

A state saved where no process group was set up holds one rank's state; it restores on that
rank (``restore_state_rank``), or anywhere when it was the only rank.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from energon_lite.errors import StateError, short_repr
from energon_lite.state.codec import decode_state, encode_state

if TYPE_CHECKING:
    from energon_lite.worker import WorkerConfig

FORMAT = "energon_lite.loader.state_dict"  # what a stateful form says it is
VERSION = 1
KEYS = ("format", "version", "step", "world_size", "rank_steps", "rank_states")

log = logging.getLogger("energon_lite")


class _Loader(Protocol):
    """What this module uses of ``SavableLoader``: its public state methods."""

    worker_config: WorkerConfig
    track_state: bool
    _global_sample_idx: int

    def save_state_rank(self) -> dict[str, Any]: ...

    def restore_state_rank(self, state: dict[str, Any] | None) -> None: ...

    def restore_state_global(
        self, states: list[dict[str, Any]] | None, *, src_rank: int | None = None
    ) -> None: ...


def _all_gather(value: Any, worker_config: WorkerConfig) -> list[Any]:
    """``value`` of every rank of the data-parallel group, in rank order (just ``[value]``
    without an initialized process group)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return [value]
    group = worker_config.data_parallel_group
    size = dist.get_world_size(group)
    if size != worker_config.world_size:
        raise StateError(
            f"state_dict: the data-parallel group has {size} ranks, the loader's WorkerConfig "
            f"says world_size={worker_config.world_size}; pass the group as "
            "WorkerConfig(data_parallel_group=...)"
        )
    gathered: list[Any] = [None] * size
    dist.all_gather_object(gathered, value, group=group)
    return gathered


def stateful_form(encoded: list[bytes], steps: list[int], world_size: int) -> dict[str, Any]:
    """What ``state_dict()`` returns, of the ranks' encoded states and steps."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "step": max(steps),
        "world_size": world_size,
        "rank_steps": steps,
        "rank_states": encoded,
    }


def is_stateful_form(value: Any) -> bool:
    """Whether ``value`` is what ``state_dict()`` returns (also after a checkpoint round trip)."""
    return isinstance(value, dict) and value.get("format") == FORMAT


def rank_states(form: dict[str, Any], where: str = "state_dict") -> list[Any]:
    """The loader states (one per saved rank, decoded) in a ``state_dict()`` form."""
    missing = [key for key in KEYS if key not in form]
    if missing:
        raise StateError(
            f"{where}: the loader's state_dict lacks {', '.join(missing)} (it has "
            f"{short_repr(sorted(str(k) for k in form))}): it was cut or is not a loader's"
        )
    if form["version"] != VERSION:
        raise StateError(
            f"{where}: loader state_dict version {short_repr(form['version'])}; this "
            f"energon_lite reads version {VERSION}"
        )
    encoded = form["rank_states"]
    if not isinstance(encoded, list) or not all(isinstance(b, bytes) for b in encoded):
        raise StateError(
            f"{where}: rank_states={short_repr(encoded)} is not a list of encoded rank states"
        )
    return [decode_state(data) for data in encoded]


def form_step(form: dict[str, Any]) -> int:
    """The step (batches delivered) a ``state_dict()`` form was saved at."""
    step = form.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise StateError(f"loader state_dict step={short_repr(step)} is not a batch count")
    return step


def _step(loader: _Loader) -> int:
    base, mark = getattr(loader, "_restored_step", (0, 0))
    return int(base) + loader._global_sample_idx - int(mark)


class StatefulLoader:
    """torch's ``Stateful`` protocol over the loader's public state methods (module doc)."""

    @property
    def step(self: _Loader) -> int:
        """Batches this rank has delivered since the run began, restored with
        ``load_state_dict`` (what the trainer counts as its step, one batch per step)."""
        return _step(self)

    def state_dict(self: _Loader) -> dict[str, Any]:
        """Every data-parallel rank's loader state and step, the same on every rank: plain
        data (str, int, lists, bytes) for ``torch.save``, DCP and the trainers that use them.
        A collective when a process group is initialized: call it on every rank."""
        wc = self.worker_config
        own = encode_state(self.save_state_rank()) if self.track_state else None
        step = _step(self)
        gathered = _all_gather((own, step), wc)
        states = [state for state, _ in gathered]
        # a get_loader() loader keeps no state: its stream starts over (logged at load)
        kept = [] if any(s is None for s in states) else states
        return stateful_form(kept, [step for _, step in gathered], wc.world_size)

    def load_state_dict(self: _Loader, state_dict: dict[str, Any]) -> None:
        """Continue from ``state_dict``: this rank's own state when the layout is the same,
        else every old rank's state redistributed over this layout (``restore_state_global``:
        the rest of the epoch once, or the same run with ``canonical_layout``)."""
        if not is_stateful_form(state_dict):
            raise StateError(
                f"load_state_dict: {short_repr(state_dict)} is not a loader state_dict "
                f"(format {FORMAT!r}); a state from save_state_rank() restores with "
                "restore_state_rank()"
            )
        states = rank_states(state_dict)
        step = form_step(state_dict)
        saved_ranks = state_dict["world_size"]
        if not states:
            log.warning(
                "load_state_dict: the loader was saved without state (get_loader()); this "
                "loader's stream starts from the beginning"
            )
            self.restore_state_rank(None)
        elif len(states) == saved_ranks:
            self.restore_state_global(states)
        elif len(states) == 1:  # saved without a process group: one rank's own state
            self.restore_state_rank(states[0])
        else:
            raise StateError(
                f"load_state_dict: {len(states)} rank states for world_size={saved_ranks}"
            )
        # the step carries on from the saved one: batches handed out from here add to it
        loader: Any = self
        loader._restored_step = (step, self._global_sample_idx)
