"""Compare two checkouts of energon_lite on one benchmark measurement, A/B alternated.

Runs ``COMMAND`` once per tree per round, alternating the order every round (A B, B A, ...),
with ``PYTHONPATH`` set to the tree (so its ``energon_lite`` is imported) and ``{tree}``
replaced by the tree's path. The command prints a JSON object (the last line starting with
``{`` or with ``RESULT``); ``--metric`` names the number to compare. Prints each tree's
median and the median, min and max of the per-round ratio B / A.

    python benchmarks/ab_versions.py --trees ../before . --rounds 5 --metric samples_per_s -- \\
        python {tree}/benchmarks/bench_pipeline.py --child energon_lite --workers 2 \\
        --data benchmarks/data/pipeline_20000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path


def run_once(tree: Path, command: list[str], metric: str) -> float:
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'benchmarks'}"}
    argv = [part.replace("{tree}", str(tree)) for part in command]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    for line in reversed(done.stdout.splitlines()):
        text = line.split("RESULT", 1)[-1].strip()
        if text.startswith("{"):
            return float(json.loads(text)[metric])
    raise SystemExit(f"{tree}: no JSON result in the output:\n{done.stdout[-2000:]}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", nargs=2, type=Path, required=True, metavar=("A", "B"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--metric", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    trees = [tree.resolve() for tree in args.trees]
    values: dict[int, list[float]] = {0: [], 1: []}
    for round_ in range(args.rounds):
        order = (0, 1) if round_ % 2 == 0 else (1, 0)
        for which in order:
            values[which].append(run_once(trees[which], command, args.metric))
        print(f"round {round_ + 1}: A {values[0][-1]:.1f}  B {values[1][-1]:.1f}", file=sys.stderr)
    ratios = [b / a for a, b in zip(values[0], values[1])]
    print(
        json.dumps(
            {
                "metric": args.metric,
                "A": str(args.trees[0]),
                "B": str(args.trees[1]),
                "A_median": statistics.median(values[0]),
                "B_median": statistics.median(values[1]),
                "ratio_median": statistics.median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
                "rounds": args.rounds,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
