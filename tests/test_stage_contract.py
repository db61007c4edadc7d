"""A stage says what the library needs of it: a new stage resumes elastically, shows in the
stats and in ``checkpoint info`` by its class's declarations alone, with no line elsewhere."""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import make_dataset

from energon_lite.cli.checkpoint_info import describe_work
from energon_lite.errors import StateError
from energon_lite.loader.probe import ChainProbe
from energon_lite.loader.stats import LoaderStats
from energon_lite.loader.stats_report import format_stats, hint, label
from energon_lite.shards.dataset import PreparedDataset
from energon_lite.stages.base import _CLASSES, Stage, stage_class
from energon_lite.stages.buffer import fetch_keys, keys_of
from energon_lite.state.codec import encode_state
from energon_lite.testing import (
    assert_elastic_resumes,
    assert_stage_resumes,
    make_reader,
    one_rank_state,
)

ROOT = Path(__file__).resolve().parent.parent


class Lag(Stage):
    """Hands its source's items out ``lag`` items late: it holds up to ``lag`` of them."""

    STATE_KEYS = ("queue",)
    STATS_LABEL = "lag"
    STATS_HINT = "lag is {percent}%: a smaller lag, or {more_workers}"
    ELASTIC_FRESH = {"queue": []}

    def __init__(self, source: Stage, lag: int) -> None:
        self.source = source
        self.lag = lag

    @classmethod
    def held_keys(cls, level: dict[str, Any]) -> list[Any]:
        return list(level["queue"])

    def stats_held(self) -> tuple[int, int | None] | None:
        return len(self._queue), self.lag

    def next(self) -> Any:
        self._start_if_fresh()
        while not self._ended and len(self._queue) <= self.lag:
            try:
                self._queue.append(self.source.next())
            except StopIteration:
                self._ended = True
        if not self._queue:
            raise StopIteration
        return self._queue.pop(0)

    def _reset(self) -> None:
        self._queue: list[Any] = []
        self._ended = False

    def _save(self) -> dict[str, Any]:
        return {"queue": keys_of(self._queue, "Lag")}

    def _restore(self, state: dict[str, Any]) -> None:
        self._reset()
        self._queue = fetch_keys(state["queue"], self.source.fetch, "Lag")


class LosesItsQueue(Lag):
    """Declares a fresh state on another layout but not the keys it holds: samples get lost."""

    @classmethod
    def held_keys(cls, level: dict[str, Any]) -> list[Any]:
        return []


class Undeclared(Lag):
    """Has state and declares nothing about an elastic restore."""

    ELASTIC_FRESH = None


class SlowLag(Lag):
    def next(self) -> Any:
        time.sleep(0.02)  # the bottleneck, whatever the machine (10 ms of preemption too)
        return super().next()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> PreparedDataset:
    return PreparedDataset(make_dataset(tmp_path_factory.mktemp("contract") / "d", 90, 10), "train")


def test_a_new_stage_resumes_on_another_layout(dataset: PreparedDataset) -> None:
    assert_stage_resumes(lambda: Lag(make_reader(dataset), 3), 40, every=7)
    for old, new, steps in ((3, 2, [5, 0, 11]), (2, 5, [7, 30]), (4, 1, [1, 2, 3, 4])):
        keys = assert_elastic_resumes(lambda r: Lag(r, 3), dataset, old, new, steps)
        assert len(keys) == len(set(keys)) == 90


def test_the_check_fails_for_a_stage_that_hides_its_keys(dataset: PreparedDataset) -> None:
    with pytest.raises(AssertionError, match=r"3 samples lost"):
        assert_elastic_resumes(lambda r: LosesItsQueue(r, 1), dataset, 3, 2, [4, 4, 4])


def test_a_stage_with_state_that_declares_nothing_is_refused(dataset: PreparedDataset) -> None:
    with pytest.raises(StateError, match="does not know how to redistribute stage 'Undeclared'"):
        assert_elastic_resumes(lambda r: Undeclared(r, 2), dataset, 2, 3, [3, 3])


def test_a_new_stage_shows_in_stats_and_checkpoint_info(dataset: PreparedDataset) -> None:
    chain = SlowLag(make_reader(dataset), 4)
    probe = ChainProbe(chain, worker=0)
    stats = LoaderStats()
    stats.begin_stream()
    chain.restore_state(None)
    for _ in range(30):
        chain.next()
        stats.received(probe.snapshot(), 0)
        probe.resume()
    summary = stats.summary()
    assert [s["name"] for s in summary["stages"]] == ["Reader", "SlowLag"]
    assert label(summary["stages"][1]) == "lag (SlowLag)"  # the label is inherited
    assert (summary["stages"][1]["held"], summary["stages"][1]["capacity"]) == (4, 4)
    assert summary["stages"][0]["capacity"] is None and summary["samples"] == 30
    assert any(line.startswith("lag (SlowLag)") for line in format_stats(summary))
    assert hint(summary, num_workers=2, cpus=4).startswith("lag is ")
    assert describe_work(chain.save_state()) == "buffered samples: 4"
    assert describe_work({"type": "NoSuchStage"}) == (
        "buffered samples: 0; stage 'NoSuchStage' unknown here: not counted"
    )


def test_offline_a_stage_that_is_not_imported_is_named(
    dataset: PreparedDataset, tmp_path: Path
) -> None:
    """In a process that never imported this test module (the offline checkpoint commands),
    the elastic restore refuses the state naming the stage, and checkpoint info says it did
    not count that stage's samples."""
    chains = [Lag(make_reader(dataset, worker_index=w, num_workers=2), 2) for w in range(2)]
    for chain in chains:
        chain.next()
    (tmp_path / "state.bin").write_bytes(
        encode_state(one_rank_state([chain.save_state() for chain in chains]))
    )
    code = (
        "import sys\n"
        "from energon_lite.cli.checkpoint_info import describe_work\n"
        "from energon_lite.resume.elastic import redistribute\n"
        "from energon_lite.state.codec import decode_state\n"
        "state = decode_state(open(sys.argv[1], 'rb').read())\n"
        "print(describe_work(state['workers'][0]))\n"
        "try:\n"
        "    redistribute([state], 1, 3)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "state.bin")],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout.splitlines()
    assert out == [
        "buffered samples: 0; stage 'Lag' unknown here: not counted",
        "StateError elastic restore does not know how to redistribute stage 'Lag' (no stage "
        "class of that name is imported)",
    ]


def test_two_stage_classes_of_one_name_are_named_when_a_state_needs_them() -> None:
    def define() -> type[Stage]:
        class Twice(Stage):
            pass

        return Twice

    class Twice(Stage):
        pass

    define()
    with pytest.raises(StateError, match="2 stage classes have that name"):
        stage_class("Twice")


def test_the_registry_completes_itself_where_states_are_read() -> None:
    """Offline (checkpoint info, redist), nothing built: the library's stages and the
    flavors' are found from the name in a state alone."""
    code = (
        "from energon_lite.stages.base import stage_class\n"
        "print(stage_class('GroupBatch').__module__, stage_class('EpisodePool').__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout.split()
    assert out == ["energon_lite.stages.group_batch", "energon_lite.flavors.episodes.pool"]


# names that are not a switch on today's stage classes: the sample type Batch, and the
# saved "type" names the one reader of old state forms reads old levels by (plain data,
# frozen with the forms it reads; state/upgrade.py)
NOT_A_STAGE = {
    ("energon_lite/__init__.py", "Batch"),  # the sample type Batch in the lazy-import table
    # the episodes package's lazy-import table names its stages' modules' exports
    ("energon_lite/flavors/episodes/__init__.py", "EpisodePool"),
    ("energon_lite/flavors/episodes/__init__.py", "EpisodeSweep"),
    ("energon_lite/state/upgrade.py", "Reader"),
    ("energon_lite/state/upgrade.py", "Encode"),
    ("energon_lite/state/upgrade.py", "Batch"),
}


def _literals(tree: ast.Module) -> list[ast.Constant]:
    """String literals of a module, less docstrings and ``__all__``."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            skip.add(id(body[0].value))  # a docstring
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            skip.update(id(n) for n in ast.walk(node.value))
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip
    ]


def test_no_module_outside_stages_knows_a_stage_by_its_name() -> None:
    """What the library needs of a stage is the stage's to say (``Stage`` declarations):
    a stage class name in a string outside ``energon_lite/stages/`` is a switch on it."""
    stage_class("no stage has this name")  # completes the registry: every stage, flavors too
    names = {
        name
        for name, classes in _CLASSES.items()
        if classes[0].__module__.startswith("energon_lite.")
    }
    assert {"Reader", "Encode", "EpisodePool"} <= names
    offenders = []
    for path in sorted((ROOT / "energon_lite").rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        if where.startswith("energon_lite/stages/"):
            continue
        for literal in _literals(ast.parse(path.read_text(encoding="utf-8"))):
            word = literal.value.strip()  # a switch compares a whole string with the name
            if word in names and (where, word) not in NOT_A_STAGE:
                offenders.append(f"{where}:{literal.lineno}: {literal.value!r}")
    assert offenders == []
