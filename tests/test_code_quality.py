"""House rules on the package's structure. Lint (ruff) and types (mypy) are CI's own steps
(README's lint command, run by .ci/run), not tests: under pytest's per-test timeout on a
loaded machine they fail for the machine's load, not for the code."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _imports(path: Path) -> list[str]:
    import ast

    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def test_no_core_module_imports_a_flavor() -> None:
    """Flavors plug in through the dataset-kind registry; the core never names one."""
    package = ROOT / "energon_lite"
    offenders = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted(package.rglob("*.py"))
        if "flavors" not in path.relative_to(package).parts
        for name in _imports(path)
        if name == "energon_lite.flavors" or name.startswith("energon_lite.flavors.")
    ]
    assert offenders == []


# Module-level state that is not per-run data: registries filled at import or by a user's
# setting, memo caches of pure functions, the session holder itself. Anything else a run keeps
# belongs to an object: the storage session (per process), a chain's context, the loader.
_MODULE_STATE_ALLOWED = {
    "energon_lite/av/rgb.py:_EXACT": "memo of a pure property of the installed libswscale "
    "(whether a kind of conversion gives PyAV's bytes)",
    "energon_lite/batching/allocate.py:_POOL": "a worker's batch memory: collate keeps "
    "Energon's signatures, so nothing can hand it the pool",
    "energon_lite/batching/sources.py:_CLASSES": "the classes whose __sources__ slot may "
    "travel pending, registered once at import (class attributes are per process)",
    "energon_lite/batching/sources.py:_LAZY": "how this process reads those classes' slot: "
    "a class attribute, per process (the trainer's through the descriptor)",
    "energon_lite/batching/memory.py:_POOLS": "unpickling calls the rebuild functions with "
    "their pickled arguments only; weak references to the trainer's pools",
    "energon_lite/epathlib/epath.py:_local": "memo of a pure function (one EPath per local "
    "path string a worker sent)",
    "energon_lite/flavors/episodes/transitions.py:_powers": "memo of a pure function",
    "energon_lite/flavors/jsonl/index.py:_SOLID": "a constant table built at import",
    "energon_lite/flavors/video_text/aspect_ratios.py:resolution_table": "memo of a pure function",
    "energon_lite/loader/torch_iter.py:check_torch": "the installed torch checked once",
    "energon_lite/samples/resolver.py:_allowed": "the user's allow_sample_type_modules",
    "energon_lite/samples/resolver.py:_trusted_joiners": "the joiners the user's specs name",
    "energon_lite/sources/kinds.py:_discovered": "the dataset-kind registry",
    "energon_lite/sources/kinds.py:_plugins": "the dataset-kind registry's entry points",
    "energon_lite/sources/kinds.py:_registered": "the dataset-kind registry",
    "energon_lite/stages/base.py:_CLASSES": "the stage-class registry",
    "energon_lite/stages/base.py:_loaded": "the stage-class registry",
    "energon_lite/stages/dealing.py:bit_reversal_order": "memo of a pure function",
    "energon_lite/storage/retry.py:STATS": "a view of the storage session's counters",
    "energon_lite/storage/session.py:_current": "the storage session itself",
}
_MUTATORS = {
    "add", "append", "appendleft", "clear", "discard", "extend", "insert", "move_to_end",
    "pop", "popitem", "remove", "setdefault", "update",
}  # fmt: skip


def _module_state(path: Path) -> set[str]:
    """The module-level names of ``path`` that hold state: rebound through ``global``,
    changed in place (a mutating method, an item set or deleted), or a module function
    memoised with a cache decorator."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    bound = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        bound |= {t.id for t in targets if isinstance(t, ast.Name)}
    found = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            "cache" in ast.unparse(d) for d in node.decorator_list
        ):
            found.add(node.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found |= set(node.names)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id in bound and node.func.attr in _MUTATORS:
                found.add(owner.id)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if not isinstance(node, ast.AugAssign) else [node.target]
            for target in targets:
                if (
                    isinstance(target, ast.Subscript)
                    and isinstance(target.value, ast.Name)
                    and target.value.id in bound
                ):
                    found.add(target.value.id)
    return found


def test_no_module_level_state_outside_a_session_object() -> None:
    """What a run keeps lives in an object (the storage session, a chain's context, the
    loader), so that two loaders in one process never share it and tests need no resets;
    a new module-level cache or counter fails here, naming the file and the name."""
    package = ROOT / "energon_lite"
    found = {
        f"{path.relative_to(ROOT).as_posix()}:{name}"
        for path in sorted(package.rglob("*.py"))
        for name in _module_state(path)
    }
    assert sorted(found - set(_MODULE_STATE_ALLOWED)) == []
    assert sorted(set(_MODULE_STATE_ALLOWED) - found) == []  # no stale allowance
