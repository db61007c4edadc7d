"""energon_lite reading Parquet, save_to_disk, MDS and LitData folders in place, against each
format's own library and against energon_lite on the same data as tar, in one run.

The W1 data (256x256 JPEG + caption, ``bench_pipeline.build_dataset``) is written once in
each format by its own library: Hugging Face ``datasets`` (an ``Image`` feature;
``to_parquet`` in the Hub layout, 100-row row groups, and ``save_to_disk``), Streaming's
``MDSWriter`` and ``litdata.optimize`` (``bench_peers.convert_streaming`` /
``convert_litdata``). energon_lite reads each folder in place after ``prepare`` wrote its
``.nv-meta`` (CaptioningSample); the peers read them with their own loaders: ``datasets``
(``Dataset.from_parquet`` or ``load_from_disk``, a transform decoding the image, a torch
``DataLoader``), Streaming's
``StreamingDataset`` + ``StreamingDataLoader``, LitData's ``StreamingDataset`` +
``StreamingDataLoader``. Every loader decodes with energon_lite's ``decode_image(jpg,
"torchrgb")``, batch 32, shuffled; each measurement runs in a fresh child process
(imports outside the timing), ``--warmup`` batches first, then ``--batches`` timed.

A library that is not installed is left out, unless ``--python LIB=INTERPRETER`` names a
Python of another environment that has it: MosaicML Streaming's loader cannot run beside
``datasets`` 5 (it imports transformers<5 and torchvision), so its writer and its loader
run under that interpreter, while energon_lite reads the same MDS folder in this one.
(Its writer alone runs here too, as the tests run it: ``synth.tables.mds_writer_class``.) ``--rounds N`` measures every row N times in turn and
prints the median of each ratio with its spread over the rounds, and the load average::

    python benchmarks/bench_formats.py [--samples 20000] [--workers 0 2] [--libs ...] \
        [--rounds 3] [--python streaming=/path/to/streaming-env/bin/python]
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import bench_peers as peers
import bench_pipeline as bp

FORMATS = {  # format -> (the library that writes and reads it, energon_lite's field map)
    "tar": ("energon_lite", {"image": "jpg", "caption": "txt"}),
    "parquet": ("datasets", {"image": "image", "caption": "caption"}),
    "arrow": ("datasets", {"image": "image", "caption": "caption"}),
    "mds": ("streaming", {"image": "jpg", "caption": "txt"}),
    "litdata": ("litdata", {"image": "jpg", "caption": "txt"}),
}


def folder(root: Path, fmt: str) -> Path:
    return {
        "tar": root,
        "parquet": root.with_name(root.name + "_parquet"),
        "arrow": root.with_name(root.name + "_arrow"),
        "mds": root.with_name(root.name + "_mds"),
        "litdata": root.with_name(root.name + "_litdata"),
    }[fmt]


@functools.lru_cache(maxsize=1)
def _tar(root: str) -> bp.PlainTarDataset:
    """The W1 tar shards, opened once per process (each opening reads every ``.tar.idx``)."""
    return bp.PlainTarDataset(Path(root))


def w1_item(root: str, index: int) -> dict[str, Any]:
    """Sample ``index`` of the W1 tar shards as LitData's item (run in its worker)."""
    parts = _tar(root).read_parts(index)
    return {"jpg": parts["jpg"], "txt": parts["txt"].decode("utf-8")}


def convert(root: Path, fmt: str, python: str = sys.executable) -> float | None:
    """Write the W1 samples in ``fmt`` once (its library, under ``python``), prepare it;
    seconds or None."""
    out = folder(root, fmt)
    if fmt == "tar" or (out / ".nv-meta" / "dataset.yaml").is_file():
        return None
    start = time.perf_counter()
    if python != sys.executable:
        subprocess.run([python, __file__, "--convert", fmt, str(root)], check=True)
    elif fmt == "mds":
        peers.convert_streaming(root)
    elif fmt == "litdata":
        from energon_lite.synth.tables import optimize_litdata

        count = len(bp.PlainTarDataset(root))
        optimize_litdata(out, functools.partial(w1_item, str(root)), count)
    else:
        from energon_lite.synth.tables import write_hf_parquet, write_save_to_disk

        rows = list(peers._samples(root))
        if fmt == "parquet":
            write_hf_parquet(out, rows, files=max(1, len(rows) // 1000), rows_per_group=100)
        else:
            write_save_to_disk(out, rows, shards=max(1, len(rows) // 1000))
    field_map = json.dumps(FORMATS[fmt][1])
    subprocess.run(
        [sys.executable, "-m", "energon_lite.cli", "prepare", "--sample-type",
         "CaptioningSample", "--field-map", field_map, "--force-overwrite", str(out)],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return time.perf_counter() - start


def _hf_loader(path: Path, workers: int) -> Any:
    import datasets
    from torch.utils.data import DataLoader

    if path.name.endswith("_parquet"):  # datasets reads Parquet into its Arrow cache first
        files = sorted(str(f) for f in path.glob("data/*.parquet"))
        dataset = datasets.Dataset.from_parquet(files, cache_dir=str(path.parent / "hf_cache"))
    else:
        dataset = datasets.load_from_disk(str(path))
    dataset = dataset.cast_column("image", datasets.Image(decode=False))

    def transform(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        return {
            "image": [peers.decode(image["bytes"]) for image in batch["image"]],
            "caption": batch["caption"],
        }

    dataset.set_transform(transform)
    return DataLoader(
        dataset, batch_size=bp.BATCH_SIZE, shuffle=True, num_workers=workers, drop_last=True,
        prefetch_factor=2 if workers else None,
    )  # fmt: skip


def _loader(lib: str, fmt: str, root: Path, workers: int) -> Any:
    if lib == "energon_lite":
        from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset

        dataset = get_train_dataset(
            folder(root, fmt),
            worker_config=WorkerConfig(rank=0, world_size=1, num_workers=workers),
            batch_size=bp.BATCH_SIZE,
            shuffle_buffer_size=bp.SHUFFLE_BUFFER,
            max_samples_per_sequence=bp.MAX_SAMPLES_PER_SEQUENCE,
        )
        return get_savable_loader(dataset)
    if lib == "datasets":
        return _hf_loader(folder(root, fmt), workers)
    return peers.NewPeer(lib, root, workers).loader()


def child(lib: str, fmt: str, root: Path, workers: int, warmup: int, batches: int) -> None:
    """One measurement: samples/s of ``batches`` batches after ``warmup`` ones."""
    loader = _loader(lib, fmt, root, workers)
    iterator = iter(loader)
    for _ in range(warmup):
        first = next(iterator)
    images = first["image"] if isinstance(first, dict) else first.image
    if tuple(images.shape) != (bp.BATCH_SIZE, 3, 256, 256):
        raise SystemExit(f"{lib} on {fmt}: a batch of {tuple(images.shape)}")
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    seconds = time.perf_counter() - start
    print(bp.RESULT + json.dumps({"samples_per_s": batches * bp.BATCH_SIZE / seconds}))


def measure(lib: str, fmt: str, root: Path, workers: int, args: argparse.Namespace) -> float:
    run = subprocess.run(
        [args.pythons.get(lib, sys.executable), __file__, "--child", lib, fmt, str(root), str(workers),
         str(args.warmup), str(args.batches)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    for line in run.stdout.splitlines():
        if line.startswith(bp.RESULT):
            return float(json.loads(line[len(bp.RESULT) :])["samples_per_s"])
    raise SystemExit(f"{lib} on {fmt} with {workers} workers failed:\n{run.stderr[-3000:]}")


def _loads(lib: str) -> bool:
    """Whether ``lib``'s loader imports here: Streaming installed without its dependencies
    (as the test command installs it, for its writer) does not, lacking transformers."""
    try:
        importlib.import_module(lib)
    except (ImportError, RuntimeError):  # RuntimeError: a torchvision that does not fit torch
        return False
    return True


def _spread(values: list[float]) -> str:
    """The median of ``values`` and their range over the rounds."""
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--libs", nargs="+", default=["datasets", "streaming", "litdata"])
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--python", nargs="*", default=[], metavar="LIB=INTERPRETER")
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    parser.add_argument("--convert", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        lib, fmt, root, workers, warmup, batches = args.child
        child(lib, fmt, Path(root), int(workers), int(warmup), int(batches))
        return
    if args.convert:
        convert(Path(args.convert[1]), args.convert[0])
        return
    args.pythons = dict(item.split("=", 1) for item in args.python)
    root = bp.build_dataset(args.samples)
    formats = [f for f, (lib, _) in FORMATS.items() if f == "tar" or lib in args.libs]
    formats = [f for f in formats if FORMATS[f][0] in args.pythons or _loads(FORMATS[f][0])]
    for fmt in formats:
        seconds = convert(root, fmt, args.pythons.get(FORMATS[fmt][0], sys.executable))
        if seconds is not None:
            print(f"wrote {fmt} in {seconds:.0f} s", file=sys.stderr)
    rows: dict[tuple[int, str], list[tuple[float, float, float]]] = {}
    loads: list[float] = []
    for round_number in range(args.rounds):
        for workers in args.workers:
            loads.append(os.getloadavg()[0])
            tar = measure("energon_lite", "tar", root, workers, args)
            rows.setdefault((workers, "tar"), []).append((tar, 0.0, tar))
            for fmt in formats[1:]:
                ours = measure("energon_lite", fmt, root, workers, args)
                theirs = measure(FORMATS[fmt][0], fmt, root, workers, args)
                rows.setdefault((workers, fmt), []).append((ours, theirs, tar))
                print(
                    f"round {round_number + 1} load {os.getloadavg()[0]:.1f} workers={workers} "
                    f"{fmt}: {ours:,.0f} / {theirs:,.0f} ({FORMATS[fmt][0]}) / tar {tar:,.0f}",
                    file=sys.stderr,
                    flush=True,
                )
    print(f"{args.rounds} round(s); load average (1 min) {min(loads):.1f}-{max(loads):.1f}")
    print("| format | workers | energon_lite samples/s | its library samples/s | "
          "energon_lite / library | energon_lite / energon_lite on tar |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- |")
    for (workers, fmt), found in rows.items():
        ours = statistics.median(r[0] for r in found)
        if fmt == "tar":
            print(f"| tar | {workers} | {ours:,.0f} | | | 1.00 |")
            continue
        theirs = statistics.median(r[1] for r in found)
        print(
            f"| {fmt} | {workers} | {ours:,.0f} | {theirs:,.0f} ({FORMATS[fmt][0]}) | "
            f"{_spread([r[0] / r[1] for r in found])} | {_spread([r[0] / r[2] for r in found])} |"
        )


if __name__ == "__main__":
    main()
