"""How long ``energon-lite`` takes to start: ``--version``, ``--help``, ``info`` of a dataset.

Each command runs as a user runs it, a fresh ``python -m energon_lite.cli`` process, ``--rounds``
times; reported: the median and the spread of the wall seconds, and for reference the time of
a bare ``python -c "import torch"`` (what every command paid before torch was imported only
where needed, issue 26 item 11). ``--repo`` measures another checkout's code (e.g. the
commit before the change) with the same interpreter. The dataset for ``info`` is written once
under ``benchmarks/data/cli_startup/`` (git-ignored).

    python benchmarks/bench_cli_startup.py [--rounds 7] [--repo PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data" / "cli_startup"


def _dataset() -> Path:
    folder = DATA / "captions"
    if not (folder / ".nv-meta").is_dir():
        from energon_lite import prepare_dataset
        from energon_lite.synth.shards import write_captioning_shards

        write_captioning_shards(folder, 200, 50, image_size=(16, 16))
        prepare_dataset(
            folder,
            split_ratio=[("train", 1)],
            sample_type="CaptioningSample",
            field_map={"image": "jpg", "caption": "txt"},
            progress=False,
        )
    return folder


def _time(argv: list[str], repo: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(repo)}
    start = time.perf_counter()
    subprocess.run(argv, cwd=repo, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repo", type=Path, default=ROOT, help="the checkout whose code runs")
    args = parser.parse_args()
    dataset = _dataset()
    cli = [sys.executable, "-m", "energon_lite.cli"]
    commands = {
        "energon-lite --version": [*cli, "--version"],
        "energon-lite --help": [*cli, "--help"],
        "energon-lite info DATASET": [*cli, "info", str(dataset)],
        'python -c "import torch"': [sys.executable, "-c", "import torch"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.rounds):  # commands interleaved, so a busy moment hits all alike
        for name, argv in commands.items():
            times[name].append(_time(argv, args.repo.resolve()))
    print(f"code: {args.repo.resolve()}; {args.rounds} rounds; load {os.getloadavg()[0]:.2f}\n")
    print("| command | median s | min s | max s |\n| --- | ---: | ---: | ---: |")
    for name, values in times.items():
        print(
            f"| `{name}` | {statistics.median(values):.3f} | {min(values):.3f} | "
            f"{max(values):.3f} |"
        )


if __name__ == "__main__":
    main()
