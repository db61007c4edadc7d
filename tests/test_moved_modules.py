"""A module that moved after its path was documented still imports at the old path, giving
the new module's own objects (``energon_lite._MOVED_MODULES``)."""

from __future__ import annotations

import importlib

import pytest

import energon_lite


@pytest.mark.parametrize("old, new", sorted(energon_lite._MOVED_MODULES.items()))
def test_the_old_path_gives_the_new_modules_objects(old: str, new: str) -> None:
    moved = importlib.import_module(old)
    home = importlib.import_module(new)
    public = [name for name in vars(home) if not name.startswith("_")]
    assert public, new
    for name in public:
        assert getattr(moved, name) is getattr(home, name), (old, name)
    assert set(public) <= set(dir(moved))
    with pytest.raises(AttributeError, match="no_such_name"):
        moved.no_such_name  # noqa: B018


def test_the_documented_energon_reader_imports_from_its_old_path() -> None:
    from energon_lite.resume.energon_import import read_energon_state
    from energon_lite.state.energon_import import read_energon_state as old

    assert old is read_energon_state


def test_a_path_that_never_existed_is_still_missing() -> None:
    with pytest.raises(ModuleNotFoundError, match=r"energon_lite\.state\.no_such_module"):
        importlib.import_module("energon_lite.state.no_such_module")
