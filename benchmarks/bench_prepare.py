"""``prepare`` of 5,000 small shards: ``energon-lite prepare`` against ``energon prepare``.

Data: ``--shards`` (5,000) tar shards of ``--per-shard`` (20) samples, each sample a
``.txt`` caption and a ``.json`` with a few fields (small members: 100-200 bytes, one
512-byte tar block each), written once under ``benchmarks/data/prepare/`` (git-ignored,
~200 MB). Each tool prepares its own folder of hard links to the same shard files, so
both read the same inodes from the same (warm) page cache, and neither sees the other's
``.tar.idx`` or ``.nv-meta``; both are deleted before every run (not timed).

Both run as the user runs them, a fresh CLI process with the same options:
``prepare PATH --non-interactive --split-ratio 8,1,1 --sample-type TextSample
--field-map '{"text": "txt"}' --num-workers 2 --force-overwrite`` (their progress bars on,
to a pipe). Energon also writes its ``index.sqlite`` (sample keys); energon_lite checks
keys for duplicates across shards and writes its shard record. Rounds alternate the order
(A B, B A, ...); reported: median wall seconds and spread per tool, the median of the
per-round ratios, and the load average before each round (the machine is shared).

    python benchmarks/bench_prepare.py [--rounds 5] [--shards 5000] [--per-shard 20]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ab_order, markdown_table, median

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "prepare"
OPTIONS = [
    "--non-interactive",
    "--split-ratio",
    "8,1,1",
    "--sample-type",
    "TextSample",
    "--field-map",
    json.dumps({"text": "txt"}),
    "--force-overwrite",
]


def build(shards: int, per_shard: int) -> Path:
    """The shard files, written once (a marker file says they are complete)."""
    source = DATA / f"shards_{shards}x{per_shard}"
    if (source / "done").exists():
        return source
    shutil.rmtree(source, ignore_errors=True)
    for s in range(shards):
        folder = source / f"part-{s // 1000:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        with tarfile.open(folder / f"shard-{s:06d}.tar", "w") as tar:
            for i in range(per_shard):
                key = f"{s:06d}_{i:04d}"
                members = {
                    "txt": f"caption {i} of shard {s}: a small photo of something".encode(),
                    "json": json.dumps({"id": s * per_shard + i, "w": 256, "h": 256}).encode(),
                }
                for ext, data in members.items():
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    info.mtime = 1_700_000_000
                    tar.addfile(info, io.BytesIO(data))
    (source / "done").write_text("ok\n")
    return source


def fresh_copy(source: Path, name: str) -> Path:
    """``DATA/<name>``: hard links to every shard, no index and no ``.nv-meta``."""
    target = DATA / name
    shutil.rmtree(target, ignore_errors=True)
    for tar in source.rglob("*.tar"):
        link = target / tar.relative_to(source)
        link.parent.mkdir(parents=True, exist_ok=True)
        os.link(tar, link)
    return target


def command(tool: str, path: Path, workers: int) -> list[str]:
    if tool == "energon":
        exe = [str(Path(sys.executable).with_name("energon")), "prepare"]
    else:
        exe = [sys.executable, "-m", "energon_lite.cli", "prepare"]
    return [*exe, str(path), *OPTIONS, "--num-workers", str(workers)]


def run(tool: str, source: Path, workers: int) -> float:
    path = fresh_copy(source, f"run_{tool}")
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    # bytecode caches as after a pip install (Energon's come with its install; ours are
    # written by the first run): this machine sets PYTHONDONTWRITEBYTECODE=1
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.perf_counter()
    done = subprocess.run(
        command(tool, path, workers),
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=3600,
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0 or not (path / ".nv-meta" / ".info.json").exists():
        raise RuntimeError(f"{tool} prepare failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shards", type=int, default=5000)
    parser.add_argument("--per-shard", type=int, default=20)
    parser.add_argument("--num-workers", type=int, default=2)
    args = parser.parse_args()
    started = time.perf_counter()
    source = build(args.shards, args.per_shard)
    for tar in source.rglob("*.tar"):  # warm the page cache for the first round too
        tar.read_bytes()
    tools = ["energon_lite", "energon"]
    times: dict[str, list[float]] = {tool: [] for tool in tools}
    loads = []
    for round_index in range(args.rounds):
        loads.append(os.getloadavg()[0])
        for tool in ab_order(tools, round_index):
            times[tool].append(run(tool, source, args.num_workers))
        print(
            f"round {round_index + 1}: load {loads[-1]:.1f}, "
            + ", ".join(f"{t} {times[t][-1]:.2f} s" for t in tools),
            flush=True,
        )
    ratios = [e / o for o, e in zip(times["energon_lite"], times["energon"])]
    print(
        f"\n{args.shards:,} shards x {args.per_shard} samples (txt + json), --num-workers "
        f"{args.num_workers}; {args.rounds} rounds, {time.strftime('%Y-%m-%d %H:%M')}, "
        f"{os.cpu_count()} CPUs, load average {min(loads):.1f}-{max(loads):.1f} before the "
        f"rounds; {time.perf_counter() - started:.0f} s in all\n"
    )
    rows = [
        [tool, f"{median(times[tool]):.2f} s", f"{min(times[tool]):.2f}-{max(times[tool]):.2f} s"]
        for tool in tools
    ]
    print(markdown_table(["prepare", "median", "spread (min-max)"], rows))
    print(
        f"\nenergon / energon_lite time, median of per-round ratios: {median(ratios):.2f}x "
        f"(min {min(ratios):.2f}x, max {max(ratios):.2f}x)"
    )
    for tool in tools:
        shutil.rmtree(DATA / f"run_{tool}", ignore_errors=True)


if __name__ == "__main__":
    main()
