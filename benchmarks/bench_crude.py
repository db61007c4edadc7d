"""Crude data (issue 12): a JSONL of captions with images in a folder, and a 2-way join.

* **JSONL + aux folder**: ``captions.jsonl`` (N lines ``{"idx", "caption", "image"}``, the
  images a folder of 1,000 small JPEGs the lines cycle over), prepared once (the index is
  the same file for both libraries), loaded through a metadataset with ``aux: {images:
  filesystem://images}`` and a cooker that reads and decodes the line's image. energon_lite
  and Megatron-Energon 7.4 run the same YAML, cooker and arguments (train split, batch 32,
  no shuffle buffer, ``max_samples_per_sequence=100``, 0 workers: the process is the
  worker).
* **join** (energon_lite only): two prepared tar datasets of N samples with the same keys
  (a caption and a label), joined by key; Energon's join needs its own prepare step and
  SQLite indexes, which this benchmark leaves out.

Per library: time to open the dataset and get the first batch, samples/s over the next
batches, and the process's private memory (USS, psutil) at the end. Rounds alternate the
libraries; tables show medians with the spread. Data is built once under
``benchmarks/data/crude`` (git-ignored). Usage: ``python benchmarks/bench_crude.py
[--lines 1000000] [--join 1000000] [--rounds 3] [--batches 300]``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "crude"
BATCH = 32


def build_jsonl(lines: int) -> Path:
    folder = DATA / f"jsonl_{lines}"
    if (folder / "captions.jsonl.idx").is_file():
        return folder
    from energon_lite.flavors.jsonl import prepare_lines
    from energon_lite.synth.lines import write_images
    from energon_lite.synth.shards import make_caption

    names = write_images(folder / "images", 1000)
    with open(folder / "captions.jsonl", "w") as file:
        for start in range(0, lines, 10_000):
            rows = (
                json.dumps({"idx": i, "caption": make_caption(i % 5000), "image": names[i % 1000]})
                for i in range(start, min(lines, start + 10_000))
            )
            file.write("\n".join(rows) + "\n")
    prepare_lines(folder / "captions.jsonl", progress=False)
    (folder / "mds.yaml").write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        "    path: captions.jsonl\n    aux:\n      images: filesystem://images\n"
    )
    return folder


def build_join(count: int) -> Path:
    folder = DATA / f"join_{count}"
    if (folder / "join.yaml").is_file():
        return folder
    from energon_lite import prepare_dataset

    for name, text in (("captions", "caption {}"), ("labels", "{}")):
        root = folder / name
        (root / "parts").mkdir(parents=True)
        for shard, start in enumerate(range(0, count, 10_000)):
            with tarfile.open(root / f"parts/data-{shard}.tar", "w") as tar:
                for i in range(start, min(count, start + 10_000)):
                    data = text.format(i % 1000).encode()
                    info = tarfile.TarInfo(f"{i:08d}.txt")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        prepare_dataset(
            root, split_ratio=[("train", 1)], sample_type="TextSample",
            field_map={"text": "txt"}, progress=False,
        )  # fmt: skip
    (folder / "join.yaml").write_text(
        "__module__: energon_lite\n__class__: MetadatasetV2\nsplits:\n  train:\n    join:\n"
        "      caption: {path: captions}\n      label: {path: labels}\n"
        "    joiner: {__module__: bench_crude, __function__: join_text}\n"
    )
    return folder


def join_text(caption: Any, label: Any) -> Any:
    from energon_lite import TextSample

    return TextSample.derive_from(caption, text=f"{caption.text}|{label.text}")


# children -----------------------------------------------------------------------------------


def child(library: str, what: str, folder: str, batches: int) -> dict[str, Any]:
    import psutil

    if library == "energon":
        import megatron.energon as lib
    else:
        import energon_lite as lib

    stateless = getattr(lib, "stateless", lambda fn: fn)

    @stateless
    def cook(sample: dict, images: Any) -> Any:
        image = images.get(sample["json"]["image"], sample)
        return lib.CaptioningSample(
            **lib.basic_sample_keys(sample), image=image, caption=sample["json"]["caption"]
        )

    class Encoder(lib.DefaultTaskEncoder):
        cookers = [lib.Cooker(cook)]

    path = Path(folder) / ("mds.yaml" if what == "jsonl" else "join.yaml")
    start = time.perf_counter()
    dataset = lib.get_train_dataset(
        path,
        worker_config=lib.WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=BATCH,
        shuffle_buffer_size=None,
        max_samples_per_sequence=100,
        task_encoder=Encoder() if what == "jsonl" else None,
    )
    loader = iter(lib.get_loader(dataset))
    next(loader)
    opened = time.perf_counter() - start
    began = time.perf_counter()
    for _ in range(batches):
        next(loader)
    rate = batches * BATCH / (time.perf_counter() - began)
    return {"open": opened, "rate": rate, "uss": psutil.Process().memory_full_info().uss}


def run_child(library: str, what: str, folder: Path, batches: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", library, what, str(folder), str(batches)],
        capture_output=True, text=True, timeout=1800,
        env={**os.environ, "PYTHONPATH": f"{HERE.parent}:{HERE}"},
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{library} {what} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _row(name: str, runs: list[dict[str, Any]]) -> str:
    rates = [r["rate"] for r in runs]
    opened = statistics.median(r["open"] for r in runs)
    uss = max(r["uss"] for r in runs) / 2**20
    return (
        f"| {name} | {opened:.2f} s | {statistics.median(rates):,.0f} "
        f"({min(rates):,.0f}-{max(rates):,.0f}) | {uss:.1f} MiB |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--join", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=300)
    args = parser.parse_args()
    started = time.perf_counter()
    jsonl = build_jsonl(args.lines)
    joined = build_join(args.join) if args.join else None
    print(f"data ready in {time.perf_counter() - started:.0f} s", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {"energon_lite": [], "energon": [], "join": []}
    for round_index in range(args.rounds):
        order = ["energon_lite", "energon"] if round_index % 2 == 0 else ["energon", "energon_lite"]
        for library in order:
            runs[library].append(run_child(library, "jsonl", jsonl, args.batches))
        if joined is not None:
            runs["join"].append(run_child("energon_lite", "join", joined, args.batches))
        print(
            f"round {round_index}: {json.dumps({k: v[-1] for k, v in runs.items() if v})}",
            flush=True,
        )
    print(f"\nJSONL of {args.lines:,} lines + aux image folder (batch {BATCH}, 0 workers)\n")
    print("| loader | open + first batch | samples/s (spread) | USS at end |")
    print("| --- | --- | --- | --- |")
    print(_row("energon_lite", runs["energon_lite"]))
    print(_row("energon", runs["energon"]))
    ratios = [a["rate"] / b["rate"] for a, b in zip(runs["energon_lite"], runs["energon"])]
    print(
        f"\nsamples/s energon_lite / Energon, same round: median {statistics.median(ratios):.2f}x "
        f"({min(ratios):.2f}-{max(ratios):.2f}x over {len(ratios)} rounds)"
    )
    opens = [a["open"] / b["open"] for a, b in zip(runs["energon_lite"], runs["energon"])]
    print(f"open + first batch energon_lite / Energon: median {statistics.median(opens):.2f}x")
    if runs["join"]:
        print(f"\n2-way join of {args.join:,} samples (energon_lite)\n")
        print("| loader | open + first batch | samples/s (spread) | USS at end |")
        print("| --- | --- | --- | --- |")
        print(_row("energon_lite join", runs["join"]))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, library, what, folder, batches = sys.argv
        print(json.dumps(child(library, what, folder, int(batches))))
    else:
        main()
