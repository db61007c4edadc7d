"""The package layout: packages by concern in layers, and a root that stays small.

``LAYERS`` is the architecture's layer order (docs/architecture.md, "The layout"), bottom
first. A *unit* is a package under ``energon_lite/`` or a module in its root. A module may
import its own unit and any unit of a lower layer, never one of its own layer or above; an
import inside a function counts like one at the top. Inside one package a circle is allowed
only through an import made lazily (inside a function) or under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "energon_lite"

LAYERS: list[tuple[str, ...]] = [
    ("errors", "edataclass", "fork_hook", "sample_utils"),  # errors; Energon's small helpers
    (
        "rng",
        "quotas",
        "storage",
        "media_records",
    ),  # derived randomness, quotas, I/O
    # the state codec and restore keys; Energon's EPath over storage; the layout (its debug
    # logs are held by the storage session)
    ("state", "epathlib", "worker"),
    ("batching", "av", "transforms"),  # collate, batch memory; audio/video; image transforms
    ("decode", "media"),  # sample part decoding; media metadata and the media filter
    ("samples",),  # the data model and the sample factory
    ("shards",),  # the built-in tar format and prepare
    ("sources",),  # the Source protocol, dataset kinds, leaves
    ("metadataset", "cache"),  # metadataset YAML; the cache pool and file stores
    ("task_encoder",),  # the user's hooks
    ("stages",),  # the Stage contract and every stage
    ("pipeline",),  # wiring a chain
    ("resume",),  # the rank state: saved, checked, restored, moved between layouts
    ("loader",),  # datasets, loaders, workers, stats
    ("wrappers", "compat"),  # Energon's wrapper classes and Energon-only names
    ("flavors", "dataset_config"),  # dataset kinds beyond tar shards; Energon's dataset_config
    ("synth", "testing"),  # sample data and resume test helpers
    ("__init__",),  # the public API
    ("cli",),  # the command line
]
MAX_ROOT_MODULES = 8  # besides __init__.py


def _layer_of() -> dict[str, int]:
    return {unit: n for n, units in enumerate(LAYERS) for unit in units}


def _units() -> list[str]:
    return sorted(
        p.stem if p.is_file() else p.name
        for p in PACKAGE.iterdir()
        if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))
    )


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _imports(path: Path, module: str | None = None) -> list[tuple[str, int, bool]]:
    """(imported energon_lite module, line, made at import time) for each import in ``path``.

    ``from energon_lite.pkg import mod`` counts as an import of ``energon_lite.pkg.mod`` when
    that is a module, so that a package's ``__init__`` is not blamed for its children.
    """
    module = module or _module_name(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lazy: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or (
            isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        ):
            lazy.update(id(child) for child in ast.walk(node) if child is not node)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(node, module, path.name == "__init__.py")
            names = []
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                is_module = (ROOT / (sub.replace(".", "/") + ".py")).exists() or (
                    ROOT / sub.replace(".", "/") / "__init__.py"
                ).exists()
                names.append(sub if is_module else target)
        else:
            continue
        found += [
            (name, node.lineno, id(node) not in lazy)
            for name in names
            if name == "energon_lite" or name.startswith("energon_lite.")
        ]
    return found


def _all_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_unit_has_a_layer() -> None:
    layer = _layer_of()
    assert [u for u in _units() if u not in layer] == [], "add new packages to LAYERS"
    assert [u for u in layer if u not in _units()] == [], "LAYERS names a unit that is gone"


def test_the_root_holds_few_modules() -> None:
    modules = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert len(modules) <= MAX_ROOT_MODULES, modules


def test_no_module_imports_its_own_layer_or_above() -> None:
    layer = _layer_of()
    offenders = []
    for path in _all_modules():
        here = _unit(_module_name(path))
        for target, line, _ in _imports(path):
            there = _unit(target)
            if there != here and layer[there] >= layer[here]:
                offenders.append(
                    f"{path.relative_to(ROOT)}:{line}: {target} "
                    f"({there}, layer {layer[there]}) from {here} (layer {layer[here]})"
                )
    assert offenders == []


def test_circles_inside_a_package_are_only_lazy() -> None:
    graph: dict[str, set[str]] = {}
    for path in _all_modules():
        module = _module_name(path)
        graph[module] = {
            target
            for target, _, eager in _imports(path)
            if eager and _unit(target) == _unit(module) and target != module
        }
    cycles = []
    state: dict[str, int] = {}  # 1: on the stack, 2: done

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt.startswith(node + "."):  # a package importing its own children
                continue
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_the_layer_test_catches_an_upward_import(tmp_path: Path) -> None:
    """The checker itself: an import of a higher layer is found (a module of the state
    package that imports the loader)."""
    probe = tmp_path / "probe.py"
    probe.write_text("from energon_lite.loader.api import get_loader\nfrom . import codec\n")
    found = [t for t, _, _ in _imports(probe, "energon_lite.state.probe")]
    assert found == ["energon_lite.loader.api", "energon_lite.state.codec"]
    layer = _layer_of()
    assert layer[_unit(found[0])] > layer["state"] == layer[_unit(found[1])]


def test_docs_describe_every_package() -> None:
    """docs/architecture.md's layout section names each package and root module."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## The layout", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([a-z_]+)(?:/|\.py)`", section))
    missing = [u for u in _units() if u != "__init__" and u not in named]
    assert missing == []
