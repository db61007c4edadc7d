"""``KeyedBuffer``: the items a stage holds between ``next()`` calls, saved as restore keys.

Shuffle, packing and bucketing buffers all keep samples across items. Their state must not
hold sample data, so a buffer saves the restore key of each item (plain data,
:func:`energon_lite.state.restore_key.to_plain`) and a restore fetches the items again through the
parent stage (random access by key, re-running the deterministic stages above the reader).
The key is the one the parent names for the item (``Stage.key_of``), kept beside it: a
hook's plain dict has none of its own, and the buffer writes none into it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from energon_lite.errors import (
    ConfigError,
    StateError,
    UnsavableStateError,
    current_restore_handler,
    logger,
    short_repr,
)
from energon_lite.stages.base import Stage
from energon_lite.state.restore_key import RestoreKey, from_plain, key_in, to_plain


def restore_key_of(item: Any, what: str) -> RestoreKey:
    """The item's restore key; a ConfigError when a hook dropped it (it cannot be saved)."""
    key = key_in(item)
    if key is None:
        raise ConfigError(
            f"{what}: a {type(item).__name__} item has no __restore_key__, so it cannot be "
            "saved in a loader state; keep it in your hooks (e.g. MySample.derive_from(sample, ...))"
        )
    return key


def _keyless_fix(what: str, hook: str, item: Any) -> str:
    return (
        f"{what}: {hook} returned a {type(item).__name__} without __restore_key__ "
        f"({short_repr(item)}), so the loader state cannot be saved. The one-line fix, in {hook}: "
        'keep the key, e.g. `out["__restore_key__"] = sample.__restore_key__` for a dict, or '
        "build the output with `MySample.derive_from(sample, ...)`"
    )


def warn_keyless(what: str, hook: str, item: Any) -> None:
    """Log that keyless items are held: training goes on, as in Energon, but
    ``save_state_rank`` will refuse (better learnt now than at the first checkpoint)."""
    logger.warning(
        "%s; training continues, save_state_rank() will refuse", _keyless_fix(what, hook, item)
    )


def unsavable(what: str, hook: str, item: Any) -> UnsavableStateError:
    """The error a save raises while ``item`` (keyless) is held."""
    return UnsavableStateError(_keyless_fix(what, hook, item))


def keys_of(items: Iterable[Any], what: str, hook: str = "encode_sample") -> list[Any]:
    """Plain restore keys of ``items``, for a state; UnsavableStateError for a keyless item."""
    keys = []
    for item in items:
        key = key_in(item)
        if key is None:
            raise unsavable(what, hook, item)
        keys.append(to_plain(key))
    return keys


def check_held(what: str, groups: list[Any], capacity: int | None, knob: str = "") -> None:
    """Refuse saved key lists that are not lists or hold more than ``capacity`` keys.

    A key may appear twice: with ``shuffle_over_epochs_multiplier`` > 1 (or -1) one epoch can
    read a slice twice, so the same sample, with the same key, can sit in a buffer twice."""
    held = 0
    for group in groups:
        if not isinstance(group, list):
            raise StateError(f"{what}: saved keys must be a list, got {short_repr(group)}")
        held += len(group)
    if capacity is not None and held > capacity:
        raise StateError(
            f"{what}: state holds {held} keys but the buffer size is {capacity}; "
            f"was it saved with another {knob}?"
        )


def fetch_keys(keys: Any, fetch: Callable[[RestoreKey], Any], what: str) -> list[Any]:
    """The items of saved plain ``keys``, fetched again; StateError for a malformed list."""
    return fetch_kept(keys, fetch, what)[0]


def fetch_kept(
    keys: Any, fetch: Callable[[RestoreKey], Any], what: str
) -> tuple[list[Any], list[Any]]:
    """The items of saved plain ``keys`` and the keys kept. A fetch that fails goes to
    Energon's ``WorkerConfig.restore_error_handler`` (default: raise); if the handler
    returns, that item is left out of the restored buffer."""
    if not isinstance(keys, list):
        raise StateError(f"{what}: saved keys must be a list, got {short_repr(keys)}")
    handler = current_restore_handler()
    items, kept = [], []
    for plain in keys:
        key = from_plain(plain)
        try:
            items.append(fetch(key))
        except (StateError, ConfigError):
            raise
        except Exception as exc:
            if handler is None:
                raise
            handler(exc, key, None)
            continue
        kept.append(plain)
    return items, kept


class KeyedBuffer:
    """A list of items filled from a source; saves and restores as restore keys.

    Each item's plain key (``source.key_of``) is computed once, when the item enters the
    buffer, and kept in a parallel list: a state is taken after every batch, so saving must
    not walk the items, and a plain dict from a hook is saved and restored by the key its
    parent knows. An item whose key nobody knows (a wrapper's function returned a dict
    without one) is held with the key None (Energon trains with such items): the first one
    logs a warning, and from then on saving raises
    UnsavableStateError (every time, not only while such an item happens to be held: a
    checkpoint that works or fails by chance is worse than one that fails at once).
    """

    __slots__ = ("hook", "items", "keyless", "keys", "source_done", "what")

    def __init__(self, what: str, hook: str = "encode_sample") -> None:
        self.what = what  # names the stage in errors
        self.hook = hook  # the hook whose outputs fill the buffer (named in errors)
        self.keyless: UnsavableStateError | None = None  # set by the first keyless item
        self.items: list[Any] = []
        self.keys: list[Any] = []  # the plain restore key of each item, same order
        self.source_done = False

    def __len__(self) -> int:
        return len(self.items)

    def fill(self, source: Stage, size: int) -> None:
        """Pull from ``source`` until ``size`` items are held or the source has ended."""
        items, keys = self.items, self.keys
        while not self.source_done and len(items) < size:
            try:
                item = source.next()
            except StopIteration:
                self.source_done = True
                return
            key = source.key_of(item)
            if key is None:
                if self.keyless is None:
                    warn_keyless(self.what, self.hook, item)
                    self.keyless = unsavable(self.what, self.hook, item)
                keys.append(None)
            else:
                keys.append(to_plain(key))
            items.append(item)

    def pop_at(self, slot: int) -> Any:
        """Remove and return item ``slot``; the last item takes its place (O(1))."""
        items, keys = self.items, self.keys
        item = items[slot]
        items[slot] = items[-1]
        keys[slot] = keys[-1]
        items.pop()
        keys.pop()
        return item

    def remove(self, slots: set[int]) -> None:
        """Drop the items at ``slots``, keeping the order of the others."""
        self.items = [item for i, item in enumerate(self.items) if i not in slots]
        self.keys = [key for i, key in enumerate(self.keys) if i not in slots]

    def clear(self) -> None:
        self.items.clear()
        self.keys.clear()

    def reset(self) -> None:
        self.items, self.keys = [], []
        self.source_done = False

    def save(self) -> list[Any]:
        if self.keyless is not None:
            raise self.keyless
        return list(self.keys)

    def restore(self, keys: Any, fetch: Callable[[RestoreKey], Any]) -> None:
        self.items, self.keys = fetch_kept(keys, fetch, self.what)
        self.source_done = False
