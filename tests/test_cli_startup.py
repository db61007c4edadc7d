"""``energon-lite --help`` and ``--version`` start without importing torch (issue 26, item 11).

The start-up time itself is measured by benchmarks/bench_cli_startup.py, not asserted here.
``import energon_lite`` imports its public names on first use; these tests also check that
every public name still resolves to what the package's type-checking imports say.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import energon_lite

INIT = Path(energon_lite.__file__)


def _modules_after(code: str) -> set[str]:
    probe = code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))\n"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_do_not_import_torch(flag: str) -> None:
    code = (
        "from energon_lite.cli import main\n"
        "try:\n"
        f"    main([{flag!r}])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
    )
    loaded = _modules_after(code)
    assert "energon_lite.cli.main" in loaded
    assert "torch" not in loaded and "numpy" not in loaded


def test_command_help_does_not_import_torch() -> None:
    code = (
        "from energon_lite.cli import main\n"
        "try:\n"
        "    main(['bench', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
    )
    assert "torch" not in _modules_after(code)


def test_info_on_a_prepared_dataset_does_not_import_torch(tmp_path: Path) -> None:
    """Commands that only read metadata and tar bytes (``info``) leave torch unimported: it is
    imported where a tensor is made, not by the kind registry's flavor packages."""
    from energon_lite.shards.prepare import prepare_dataset
    from energon_lite.synth.shards import write_captioning_shards

    root = tmp_path / "ds"
    write_captioning_shards(root, 20, 10, image_size=(8, 8))
    prepare_dataset(root, split_ratio=[("train", 1)], sample_type="CaptioningSample",
                    field_map={"image": "jpg", "caption": "txt"}, progress=False)  # fmt: skip
    code = f"from energon_lite.cli import main\nassert main(['info', {str(root)!r}]) == 0\n"
    loaded = _modules_after(code)
    assert "energon_lite.cli.info" in loaded and "energon_lite.sources.kinds" in loaded
    assert "torch" not in loaded


def test_a_public_name_imports_its_module_on_first_use() -> None:
    loaded = _modules_after("import energon_lite\nenergon_lite.WorkerConfig")
    assert "energon_lite.worker" in loaded and "torch" not in loaded
    assert "torch" in _modules_after("from energon_lite import get_train_dataset")


def _type_checking_imports() -> dict[str, str]:
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
    )
    return {
        alias.asname or alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


def test_every_public_name_resolves_to_its_declared_module() -> None:
    declared = _type_checking_imports()
    lazy = dict(energon_lite._LAZY)
    jsonl = {name: lazy.pop(name) for name in list(lazy) if "flavors" in lazy[name]}
    assert lazy == declared  # the run-time table and the type checkers' imports agree
    assert set(energon_lite.__all__) == {*declared, *jsonl, "edataclass"}
    for name in energon_lite.__all__:
        module = "energon_lite.edataclass" if name == "edataclass" else energon_lite._LAZY[name]
        assert getattr(energon_lite, name) is getattr(importlib.import_module(module), name)
    assert set(energon_lite.__all__) <= set(dir(energon_lite))
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        energon_lite.NoSuchName  # noqa: B018


def test_edataclass_stays_the_decorator() -> None:
    import energon_lite.edataclass

    module = sys.modules["energon_lite.edataclass"]
    assert energon_lite.edataclass is module.edataclass and callable(energon_lite.edataclass)
