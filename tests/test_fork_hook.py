"""``energon_lite.fork_hook``: callbacks before and after ``os.fork``, held weakly, as
Energon's ``megatron.energon.fork_hook`` (the oracle for ``WeakCallbacks``)."""

from __future__ import annotations

import gc
import multiprocessing
import os
from dataclasses import dataclass

import pytest

from energon_lite.fork_hook import (
    DataclassForkMixin,
    ForkMixin,
    WeakCallbacks,
    after_in_child_fork_hook,
    after_in_parent_fork_hook,
    before_fork_hook,
)


def _exercise(registry_type: type) -> list[object]:
    """Calls and entry counts of a registry through adds, runs and deletions."""
    calls: list[str] = []

    class Owner:
        def method(self) -> None:
            calls.append("method")

    def fn() -> None:
        calls.append("fn")

    owner, registry = Owner(), registry_type()
    registry.add_hook(owner.method)
    registry.add_hook(fn)
    registry.add_hook(owner.method)  # the same object's method again: one entry
    registry.add_hook(lambda: calls.append("kept"), make_persistent=True)
    registry.run()
    seen: list[object] = [list(calls), len(registry._hooks)]
    del owner
    gc.collect()
    seen.append(len(registry._hooks))
    del fn
    gc.collect()
    calls.clear()
    registry.run()
    seen += [list(calls), len(registry._hooks)]
    return seen


def test_weak_callbacks_behave_as_energons() -> None:
    energon = pytest.importorskip("megatron.energon.fork_hook")
    ours = _exercise(WeakCallbacks)
    assert ours == [["method", "fn", "kept"], 3, 2, ["kept"], 1]
    assert ours == _exercise(energon.WeakCallbacks)


def test_hooks_and_mixins_run_around_a_fork() -> None:
    calls: list[str] = []

    class Plain(ForkMixin):
        def __before_fork__(self) -> None:
            calls.append("plain before")

        def __after_in_parent_fork__(self) -> None:
            calls.append("plain parent")

    @dataclass
    class Data(DataclassForkMixin):
        name: str = "d"

        def __before_fork__(self) -> None:
            calls.append(f"{self.name} before")

        def __after_in_child_fork__(self) -> None:
            os._exit(0 if {"plain before", "d before", "lambda"} <= set(calls) else 3)

    def parent() -> None:
        calls.append("parent")

    plain, data = Plain(), Data()
    before_fork_hook(lambda: calls.append("lambda"), make_persistent=True)
    after_in_parent_fork_hook(parent)
    after_in_child_fork_hook(lambda: None)  # weak: gone at once, never runs

    context = multiprocessing.get_context("fork")
    process = context.Process(target=lambda: None)
    process.start()
    process.join(30)
    assert process.exitcode == 0  # the child saw both before-hooks, then exited in its hook
    assert "plain before" in calls and "d before" in calls and "lambda" in calls
    assert calls.count("plain parent") == 1 and calls.count("parent") == 1

    del plain, data, parent
    gc.collect()
    calls.clear()
    process = context.Process(target=lambda: None)
    process.start()
    process.join(30)
    assert calls == ["lambda"]  # the objects and the function are gone, their hooks too
