"""Callbacks around ``os.fork`` (Energon's ``megatron.energon.fork_hook``): run code before a
worker process is forked, and after it in the child or the parent.

Hooks are held weakly: a hook whose function or object is gone is dropped, so registering an
object's method does not keep the object alive. ``ForkMixin`` (and ``DataclassForkMixin`` for
dataclasses) register an object's ``__before_fork__`` / ``__after_in_child_fork__`` /
``__after_in_parent_fork__`` when the class overrides them.
"""

from __future__ import annotations

import contextlib
import gc
import os
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DataclassForkMixin",
    "ForkMixin",
    "WeakCallbacks",
    "after_in_child_fork_hook",
    "after_in_parent_fork_hook",
    "before_fork_hook",
]


class WeakCallbacks:
    """A set of callbacks held by weak reference (or strongly, when asked), run in the order
    they were added. A bound method is keyed by its object (one entry per object), a
    function by itself; adding the same one twice keeps one entry."""

    def __init__(self) -> None:
        self._hooks: dict[int, Callable[[], Callable[..., Any] | None]] = {}

    def add_hook(self, callable: Callable[..., Any], make_persistent: bool = False) -> None:
        """Add ``callable``; ``make_persistent=True`` holds it strongly (a lambda, a closure
        nobody else keeps)."""
        owner = getattr(callable, "__self__", None)
        key = id(owner) if owner is not None else id(callable)
        if make_persistent:
            self._hooks[key] = lambda: callable
            return
        hooks = self._hooks

        def forget(_: object) -> None:
            hooks.pop(key, None)

        ref: Callable[[], Callable[..., Any] | None]
        if owner is not None:
            ref = weakref.WeakMethod(callable, forget)
        else:
            ref = weakref.ref(callable, forget)
        self._hooks[key] = ref

    def run(self, *args: Any, **kwargs: Any) -> None:
        """Call every live callback with the arguments."""
        for ref in list(self._hooks.values()):
            hook = ref()
            if hook is not None:
                hook(*args, **kwargs)


_before = WeakCallbacks()
_after_in_child = WeakCallbacks()
_after_in_parent = WeakCallbacks()


def before_fork_hook(callable: Callable[[], None], make_persistent: bool = False) -> None:
    """Run ``callable`` before each fork (held weakly unless ``make_persistent``)."""
    _before.add_hook(callable, make_persistent)


def after_in_child_fork_hook(callable: Callable[[], None], make_persistent: bool = False) -> None:
    """Run ``callable`` in the child process right after each fork."""
    _after_in_child.add_hook(callable, make_persistent)


def after_in_parent_fork_hook(callable: Callable[[], None], make_persistent: bool = False) -> None:
    """Run ``callable`` in the parent process right after each fork."""
    _after_in_parent.add_hook(callable, make_persistent)


def _register_overrides(obj: Any, base: type) -> None:
    for name, register in (
        ("__before_fork__", before_fork_hook),
        ("__after_in_child_fork__", after_in_child_fork_hook),
        ("__after_in_parent_fork__", after_in_parent_fork_hook),
    ):
        if getattr(type(obj), name) is not getattr(base, name):
            register(getattr(obj, name))


class ForkMixin:
    """Registers the fork methods a subclass overrides, at construction."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.__post_init__()

    def __post_init__(self) -> None:
        _register_overrides(self, ForkMixin)

    def __before_fork__(self) -> None:
        """Runs before a fork."""

    def __after_in_child_fork__(self) -> None:
        """Runs in the child after a fork."""

    def __after_in_parent_fork__(self) -> None:
        """Runs in the parent after a fork."""


@dataclass
class DataclassForkMixin:
    """``ForkMixin`` for dataclasses: registers in ``__post_init__``."""

    def __post_init__(self) -> None:
        _register_overrides(self, DataclassForkMixin)

    def __before_fork__(self) -> None:
        """Runs before a fork."""

    def __after_in_child_fork__(self) -> None:
        """Runs in the child after a fork."""

    def __after_in_parent_fork__(self) -> None:
        """Runs in the parent after a fork."""


@contextlib.contextmanager
def parents_objects_kept_from_children() -> Iterator[None]:
    """Processes forked inside this block never garbage-collect what this process holds now.

    A forked child that collects a garbage cycle it inherited runs that garbage's finalizers
    in a process without the parent's threads: a PyAV frame that was scaled with swscale's
    slice threads then waits forever in the child for threads that exist only in the parent
    (a DataLoader worker hung that way after the trainer had decoded a video itself). And a
    collection in the child touches every inherited object, copying the pages it shares with
    the parent. So the objects are moved to the collector's permanent generation (``gc.freeze``)
    for the fork and back afterwards in this process. A process that froze objects itself
    (``gc.get_freeze_count()`` > 0) manages freezing for its forks already: left as it is.
    """
    if gc.get_freeze_count():
        yield
        return
    parent = os.getpid()
    gc.freeze()
    try:
        yield
    finally:
        if os.getpid() == parent:  # a child that returns from a bare os.fork() keeps them
            gc.unfreeze()


os.register_at_fork(
    before=_before.run, after_in_child=_after_in_child.run, after_in_parent=_after_in_parent.run
)
