"""Every guide in docs/ runs as a user pastes it: its ```python and ```bash blocks in order,
the Python ones in one namespace per guide, all in one working folder.

A ```bash block runs in bash with ``energon-lite`` being this checkout's command; one made
only of plain ``energon-lite ...`` lines (no pipe, redirect, variable or glob) runs each line
through the command's ``main`` in this process instead (conftest's ``run_cli``: the same
parser and code, exit status and output, without a fresh interpreter importing torch per
line; tests/test_cli_startup.py starts the real command). A block that cannot run here (an install, cloud credentials) is preceded by
``<!-- docs-test: skip (why) -->``, which the test requires to give a reason.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest
from conftest import run_cli

from energon_lite import SavableLoader

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
BLOCK = re.compile(
    r"(?:<!-- docs-test: skip \((?P<why>[^)]*)\) -->\n)?```(?P<lang>python|bash)\n(?P<code>.*?)```",
    flags=re.S,
)


def _blocks(doc: Path) -> list[tuple[str, str, str | None]]:
    """``(language, code, reason to skip or None)`` of each python/bash block, in order."""
    text = doc.read_text(encoding="utf-8")
    return [(m["lang"], m["code"], m["why"]) for m in BLOCK.finditer(text)]


# ``print(...)  # [0.0, 2.5]``: a comment that starts like a value (a bracket or a digit) is
# what the line prints, and the test holds the guide to it; prose comments are left alone
PRINTED = re.compile(
    r"^(?P<indent>[ \t]*)print\((?P<args>.*)\)[ \t]+# (?P<shown>[\[({\d-].*?)[ \t]*$", re.M
)


def _checking_prints(code: str, where: str) -> str:
    """``code`` with each ``print(...)  # <output>`` line checking that it prints <output>."""

    def check(match: re.Match[str]) -> str:
        shown, args = match["shown"], match["args"]
        return f"{match['indent']}__printed__({shown!r}, {where!r}, {args})"

    return PRINTED.sub(check, code)


def _printed(shown: str, where: str, *values: object) -> None:
    """``print(*values)``, and the guide's comment must be exactly what it printed."""
    line = " ".join(str(value) for value in values)
    print(line)
    assert line == shown, f"{where}: the comment says {shown!r}, the code prints {line!r}"


def _cli_commands(code: str) -> list[list[str]] | None:
    """The arguments of each line of ``code`` when every line is a plain ``energon-lite``
    command (comments and continued lines allowed); None when any needs the shell."""
    commands = []
    for line in code.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
        if not words:
            continue
        shell = [w for w in words if set(w) <= set("();<>|&") or set(w) & set("$`*?~")]
        if words[0] != "energon-lite" or shell:
            return None
        commands.append(words[1:])
    return commands


def _run_bash(code: str, where: str) -> None:
    """A shell block as a user pastes it, ``energon-lite`` being this checkout's command
    (plain ``energon-lite`` lines in this process, see the module's docstring)."""
    commands = _cli_commands(code)
    if commands is not None:
        for args in commands:
            done = run_cli(*args)
            assert done.returncode == 0, (
                f"{where} failed: energon-lite {shlex.join(args)}\n"
                f"{done.stdout[-2000:]}{done.stderr[-3000:]}"
            )
        return
    command = f'energon-lite() {{ "{sys.executable}" -m energon_lite.cli "$@"; }}\nset -e\n'
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        ["bash", "-c", command + code],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (
        f"{where} failed:\n{code}\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
    )


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_guide_code_runs(doc: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = _blocks(doc)
    assert any(lang == "python" for lang, _, _ in blocks), f"{doc.name} has no python block"
    assert all(why is None or why.strip() for _, _, why in blocks), "a skip needs a reason"
    monkeypatch.chdir(tmp_path)
    # the guide's classes live in an importable module, as they would in a user's script,
    # so that worker processes can send instances of them to the trainer
    module = types.ModuleType("__docs__")
    monkeypatch.setitem(sys.modules, "__docs__", module)
    namespace = module.__dict__
    namespace["__printed__"] = _printed
    try:
        for number, (lang, block, skip) in enumerate(blocks):
            where = f"{doc.name}[block {number}]"
            if skip is not None:
                continue
            if lang == "bash":
                _run_bash(block, where)
                continue
            # dont_inherit: the guide's code must not run under this file's __future__ imports
            code = _checking_prints(block, where)
            exec(compile(code, where, "exec", dont_inherit=True), namespace)
    finally:
        # a script's loaders end with the script; this namespace lives in a reference cycle
        # (its functions hold it), so close them rather than leave them to the collector
        for value in list(namespace.values()):
            if isinstance(value, SavableLoader):
                value.close()


def test_readme_commands_are_the_ci_commands() -> None:
    """.ci/run is the README's test command, then its lint and type check command, and nothing
    else: what a newcomer runs is what CI runs."""
    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text(encoding="utf-8")
    ci = (root / ".ci" / "run").read_text(encoding="utf-8")
    steps = [
        line
        for line in ci.splitlines()
        if line.strip() and not line.startswith("#") and not line.startswith(("set ", "cd "))
    ]
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.S)
    assert len(steps) == 2, steps
    test_command, checks = steps
    assert test_command in blocks
    # Chromium (the report's browser test) installs in the background while pip installs,
    # never failing the command (no root, no apt: that test skips, saying why); pytest waits
    chromium, python = test_command.split(" & ", 1)
    assert "apt-get install -yqq --no-install-recommends chromium" in chromium
    assert chromium.startswith("(") and chromium.endswith("|| true) </dev/null >/dev/null 2>&1")
    assert python.startswith("python3 -m venv")
    # bytecode written once, where the machine sets PYTHONDONTWRITEBYTECODE
    assert python.endswith(" && wait $! && PYTHONDONTWRITEBYTECODE= python -m pytest -q -n 2")
    assert checks in blocks
    assert checks.split(" && ") == [
        "python -m ruff check .",
        "python -m ruff format --check .",
        "python -m mypy",
    ]
    assert "set -euo pipefail" in ci  # a failing step, pytest's exit 5 included, fails CI
    assert "energon-lite demo" in readme


def _readme_prepare() -> list[str]:
    import shlex

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    use = readme[readme.index("## Use") :]
    command = re.search(r"```bash\n(.*?)```", use, flags=re.S).group(1)
    prepare = shlex.split(command.splitlines()[0].rstrip("\\") + command.splitlines()[1])
    assert prepare[:2] == ["energon-lite", "prepare"]
    return prepare[1:]


@pytest.mark.parametrize("num_shards", [2, 4])
def test_readme_prepare_works_on_a_few_shards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, num_shards: int
) -> None:
    """A newcomer's first data has a few shards; README's prepare line fills every split of
    its ratio from 2 shards on (README says so, and what 1 shard or 8,1,1 needs)."""
    from energon_lite.cli import main
    from energon_lite.shards.meta import load_split
    from energon_lite.synth.shards import write_captioning_shards

    monkeypatch.chdir(tmp_path)
    write_captioning_shards(tmp_path / "my_dataset", 10 * num_shards, 10, image_size=(8, 8))
    assert main(_readme_prepare()) == 0
    split = load_split(tmp_path / "my_dataset")
    assert all(split.split_parts[name] for name in ("train", "val")), split.split_parts


def test_readme_code_runs_and_its_loop_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README's "Use" block, on a dataset prepared by README's own command line."""
    from energon_lite.cli import main
    from energon_lite.synth.shards import write_captioning_shards

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    use = readme[readme.index("## Use") :]
    monkeypatch.chdir(tmp_path)
    write_captioning_shards(tmp_path / "my_dataset", 300, 30, image_size=(16, 16))
    assert main(_readme_prepare()) == 0
    block = re.search(r"```python\n(.*?)```", use, flags=re.S).group(1)
    namespace: dict = {}

    def endless(*_: object) -> None:
        raise TimeoutError("README's loop did not end within 120 s")

    previous = signal.signal(signal.SIGALRM, endless)
    signal.alarm(120)
    try:
        exec(compile(block, "README.md[Use]", "exec", dont_inherit=True), namespace)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert namespace["step"] == namespace["num_steps"] - 1
    assert namespace["state"]["type"] == "SavableLoader"
