"""docs/robot_episodes.md: every ```python block runs, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "robot_episodes.md"


def test_robot_episodes_guide_runs(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 6
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    for number, block in enumerate(blocks):
        exec(compile(block, f"{DOC.name}[block {number}]", "exec"), namespace)
    assert namespace["stats"]["loaded_episodes"] == 5
    assert len(namespace["seen"]) == namespace["index"].total_frames
