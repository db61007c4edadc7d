"""Every ```python block of every guide in docs/ runs, in order, in one namespace per guide."""

from __future__ import annotations

import re
import signal
import sys
import types
from pathlib import Path

import pytest

from energon_lite import SavableLoader

DOCS = sorted((Path(__file__).resolve().parent.parent / "docs").glob("*.md"))


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_guide_code_runs(doc: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, f"{doc.name} has no python block"
    monkeypatch.chdir(tmp_path)
    # the guide's classes live in an importable module, as they would in a user's script,
    # so that worker processes can send instances of them to the trainer
    module = types.ModuleType("__docs__")
    monkeypatch.setitem(sys.modules, "__docs__", module)
    namespace = module.__dict__
    try:
        for number, block in enumerate(blocks):
            # dont_inherit: the guide's code must not run under this file's __future__ imports
            exec(
                compile(block, f"{doc.name}[block {number}]", "exec", dont_inherit=True), namespace
            )
    finally:
        # a script's loaders end with the script; this namespace lives in a reference cycle
        # (its functions hold it), so close them rather than leave them to the collector
        for value in list(namespace.values()):
            if isinstance(value, SavableLoader):
                value.close()


def test_readme_commands_are_the_ci_commands() -> None:
    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text(encoding="utf-8")
    ci = (root / ".ci" / "run").read_text(encoding="utf-8")
    test_command = next(line for line in ci.splitlines() if line.startswith("python3 -m venv"))
    assert test_command in readme
    assert "energon-lite demo" in readme


def test_readme_code_runs_and_its_loop_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README's "Use" block, on a dataset prepared by README's own command line."""
    import shlex

    from energon_lite.cli import main
    from energon_lite.synth.shards import write_captioning_shards

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    use = readme[readme.index("## Use") :]
    command = re.search(r"```bash\n(.*?)```", use, flags=re.S).group(1)
    prepare = shlex.split(command.splitlines()[0].rstrip("\\") + command.splitlines()[1])
    monkeypatch.chdir(tmp_path)
    write_captioning_shards(tmp_path / "my_dataset", 300, 30, image_size=(16, 16))
    assert prepare[:2] == ["energon-lite", "prepare"] and main(prepare[1:]) == 0
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
