"""The house rules CI enforces: ruff lint and format clean, and mypy clean on the package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_lint_and_format_are_clean() -> None:
    pytest.importorskip("ruff")
    lint = _run(sys.executable, "-m", "ruff", "check", ".")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = _run(sys.executable, "-m", "ruff", "format", "--check", ".")
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_mypy_is_clean_on_the_package() -> None:
    pytest.importorskip("mypy")
    done = _run(sys.executable, "-m", "mypy")
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]


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
