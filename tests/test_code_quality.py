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
