"""Huge meta lists (requirement document 004): three strategies of the document vs energon_lite.

A meta list is one line per sample, ``<image path> <label>``. The document's strategies,
implemented here as it describes them (each runs in a fresh process that imports torch,
as a DataLoader worker would):

* **list** - ``BaseDataset``: ``readlines()`` into a Python list of stripped strings in every
  process; ``__getitem__`` indexes it.
* **rank-sharded** - ``RankDataset`` with ``reload_cfg = {mini_epoch: 2, seed: epoch,
  mini_epoch_idx: 0}`` for rank 0 of ``world_size = 8``: a seeded permutation of all line
  numbers assigns each (mini-epoch, rank) its ``len // (world_size * mini_epoch)`` lines; the
  process reads the file once and keeps only its lines (the document's local-read variant).
* **server** - a central meta server over loopback HTTP (``/get_len``, ``/get/<idx>``, JSON,
  a threading ``http.server`` holding the list once) and the document's ``ServerDataset``
  client, one ``requests.get`` per meta with a bounded retry (the document's ``@retry``).
  The document's ``ServerDataset`` also calls ``BaseDataset.__init__`` and so loads the whole
  list in every process as well; we leave that out, which only flatters the server.
* **energon_lite** - ``energon-lite prepare meta.txt`` once, then the ordinary pipeline:
  ``get_train_dataset(meta.txt)`` with a cooker returning ``(path, label)``, batches of 256,
  shuffled slices of 1,000 lines, read through the line index.

Per strategy and size: process memory (USS, psutil) after start-up and after reading, the
part the dataset adds over the same process with only torch imported, start-up time (until
the first meta can be served), metas/s for random access (or the pipeline's order), and for
the server its qps ceiling with 4 concurrent client processes. Sizes whose list would not
fit in the free memory are skipped for the list and server strategies (printed as such).

Usage: ``python benchmarks/bench_meta.py [--sizes 1M,10M,100M] [--rounds 3]``. Scratch data
goes to ``benchmarks/scratch/`` (git-ignored) and is deleted at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

HERE = Path(__file__).resolve().parent
WORLD_SIZE, MINI_EPOCH = 8, 2
LINE = 29  # b"train/img_000000123.JPEG 123\n"
READS = {"list": 500_000, "rank-sharded": 500_000, "server": 1_000, "energon_lite": 500_000}


# data ----------------------------------------------------------------------------------------


def write_meta(path: Path, count: int) -> None:
    """``train/img_<9 digits>.JPEG <3 digits>`` lines, written with numpy in chunks."""
    template = np.frombuffer(b"train/img_000000000.JPEG 000\n", dtype=np.uint8)
    with open(path, "wb") as file:
        for start in range(0, count, 1_000_000):
            index = np.arange(start, min(count, start + 1_000_000), dtype=np.int64)
            block = np.tile(template, (len(index), 1))
            for digit in range(9):
                block[:, 18 - digit] = 48 + (index // 10**digit) % 10
            for digit in range(3):
                block[:, 27 - digit] = 48 + ((index % 1000) // 10**digit) % 10
            file.write(block.tobytes())


# children: one strategy each, in a fresh process --------------------------------------------


def uss() -> int:
    return int(psutil.Process().memory_full_info().uss)


def child_list(path: Path, count: int) -> dict[str, Any]:
    base = uss()
    start = time.perf_counter()
    with open(path) as file:
        metas = [line.strip() for line in file.readlines()]
    startup = time.perf_counter() - start
    return {"base": base, "startup": startup, **_random_reads(lambda i: metas[i], len(metas))}


def child_rank(path: Path, count: int) -> dict[str, Any]:
    base = uss()
    start = time.perf_counter()
    with open(path, "rb") as file:  # the document reads the list to know its length
        total = sum(1 for _ in file)
    perm = np.random.RandomState(0).permutation(total)  # seed = epoch 0
    share = total // (WORLD_SIZE * MINI_EPOCH)
    rank, mini_epoch_idx = 0, 0
    offset = (mini_epoch_idx * WORLD_SIZE + rank) * share
    mine = np.sort(perm[offset : offset + share])
    del perm
    metas: list[str] = []
    wanted, position = mine.tolist(), 0
    with open(path) as file:
        for number, line in enumerate(file):
            if position < len(wanted) and number == wanted[position]:
                metas.append(line.strip())
                position += 1
    del mine, wanted
    startup = time.perf_counter() - start
    return {"base": base, "startup": startup, **_random_reads(lambda i: metas[i], len(metas))}


def child_server_client(port: int, reads: int) -> dict[str, Any]:
    import requests

    base = uss()
    session = requests.Session()

    def get(url: str) -> Any:
        for attempt in range(10):  # the document's @retry(stop_max_attempt_number=10)
            try:
                return session.get(url, timeout=10).json()
            except requests.RequestException:
                if attempt == 9:
                    raise
                time.sleep(0.01)
        raise AssertionError("unreachable")

    start = time.perf_counter()
    meta_num = int(get(f"http://127.0.0.1:{port}/get_len"))
    startup = time.perf_counter() - start
    rng = np.random.default_rng(1)
    indices = rng.integers(0, meta_num, size=reads).tolist()
    began = time.perf_counter()
    for index in indices:
        meta = get(f"http://127.0.0.1:{port}/get/{index}")
    elapsed = time.perf_counter() - began
    assert isinstance(meta, str)
    return {"base": base, "startup": startup, "uss_after": uss(), "metas_per_s": reads / elapsed}


def child_energon_lite(path: Path, count: int) -> dict[str, Any]:
    from energon_lite import Cooker, DefaultTaskEncoder, WorkerConfig, get_loader, get_train_dataset

    base = uss()

    def cook(sample: dict) -> dict:
        return {"__key__": sample["__key__"], "path": sample["path"], "label": sample["label"]}

    class Encoder(DefaultTaskEncoder):
        cookers = (Cooker(cook),)

        def batch(self, samples: list) -> Any:
            return samples

    start = time.perf_counter()
    dataset = get_train_dataset(
        path,
        worker_config=WorkerConfig(rank=0, world_size=WORLD_SIZE, num_workers=0),
        batch_size=256,
        shuffle_buffer_size=None,
        max_samples_per_sequence=1000,
        task_encoder=Encoder(),
    )
    batches = iter(get_loader(dataset))
    first = next(batches)
    startup = time.perf_counter() - start
    uss_start = uss()
    reads = READS["energon_lite"]
    began = time.perf_counter()
    got = len(first)
    while got < reads:
        got += len(next(batches))
    elapsed = time.perf_counter() - began
    return {
        "base": base,
        "startup": startup,
        "uss_start": uss_start,
        "uss_after": uss(),
        "metas_per_s": got / elapsed,
    }


def _random_reads(get: Any, length: int) -> dict[str, Any]:
    uss_start = uss()
    reads = min(READS["list"], length)
    indices = np.random.default_rng(1).integers(0, length, size=reads).tolist()
    began = time.perf_counter()
    for index in indices:
        meta = get(index)
    elapsed = time.perf_counter() - began
    assert isinstance(meta, str)
    return {"uss_start": uss_start, "uss_after": uss(), "metas_per_s": reads / elapsed}


def serve(path: Path, port: int) -> None:
    """The document's server.py: the list in one process, ``/get_len`` and ``/get/<idx>``."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    with open(path) as file:
        metas = [line.strip() for line in file.readlines()]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/get_len":
                body = json.dumps(len(metas)).encode()
            elif self.path.startswith("/get/"):
                body = json.dumps(metas[int(self.path[5:])]).encode()
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    Handler.protocol_version = "HTTP/1.1"  # keep-alive, as requests.Session uses it
    Handler.disable_nagle_algorithm = True  # else each reply waits for a delayed ACK (40 ms)
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(json.dumps({"ready": True, "uss": uss()}), flush=True)
    server.serve_forever()


# parent ---------------------------------------------------------------------------------------


def run_child(*args: str, timeout: float = 1800) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(HERE.parent)},
    )
    if done.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def measure_server(path: Path, rounds: int) -> dict[str, Any]:
    port = free_port()
    start = time.perf_counter()
    server = subprocess.Popen(
        [sys.executable, __file__, "--child", "serve", str(path), str(port)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(HERE.parent)},
    )
    try:
        assert server.stdout is not None
        ready = json.loads(server.stdout.readline())
        server_startup = time.perf_counter() - start
        clients = [run_child("client", str(port), str(READS["server"])) for _ in range(rounds)]
        began = time.perf_counter()
        concurrent = [
            subprocess.Popen(
                [sys.executable, __file__, "--child", "client", str(port), str(READS["server"])],
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONPATH": str(HERE.parent)},
            )
            for _ in range(4)
        ]
        for proc in concurrent:
            proc.wait(timeout=600)
        qps = 4 * READS["server"] / (time.perf_counter() - began)
    finally:
        server.terminate()
        server.wait(timeout=30)
    result = _summarise(clients)
    result.update(server_uss=ready["uss"], server_startup=server_startup, qps_ceiling=qps)
    return result


def _summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    rates = [r["metas_per_s"] for r in runs]
    first = runs[0]
    return {
        "startup": statistics.median(r["startup"] for r in runs),
        "uss_start": first.get("uss_start", first["base"]),
        "uss_after": max(r["uss_after"] for r in runs),
        "added": max(r["uss_after"] - r["base"] for r in runs),
        "metas_per_s": statistics.median(rates),
        "spread": (min(rates), max(rates)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1M,10M,100M")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    scratch = HERE / "scratch" / "meta"
    scratch.mkdir(parents=True, exist_ok=True)
    sizes = [int(float(s.rstrip("M")) * 1_000_000) for s in args.sizes.split(",")]
    results: dict[int, dict[str, Any]] = {}
    try:
        for count in sizes:
            path = scratch / f"meta_{count}.txt"
            started = time.perf_counter()
            write_meta(path, count)
            written = time.perf_counter() - started
            started = time.perf_counter()
            from energon_lite.flavors.jsonl import prepare_lines

            prepare_lines(path, progress=False)
            prepared = time.perf_counter() - started
            print(
                f"{count:,} lines: written in {written:.1f} s, prepared in {prepared:.1f} s",
                flush=True,
            )
            row: dict[str, Any] = {"prepare": prepared}
            fits = count * 110 < psutil.virtual_memory().available * 0.4  # a list of str
            for name in ("energon_lite", "rank-sharded", "list"):
                if name == "list" and not fits:
                    row[name] = None
                    continue
                rounds = args.rounds if name == "energon_lite" or count <= 10_000_000 else 1
                runs = [run_child(name, str(path), str(count)) for _ in range(rounds)]
                row[name] = _summarise(runs)
                print(f"  {name}: {json.dumps(row[name])}", flush=True)
            row["server"] = measure_server(path, args.rounds) if fits else None
            print(f"  server: {json.dumps(row['server'])}", flush=True)
            results[count] = row
            if not args.keep:
                for file in scratch.glob(f"meta_{count}.txt*"):
                    file.unlink()
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps({str(k): v for k, v in results.items()}, indent=1))


def child_main(argv: list[str]) -> None:
    kind = argv[0]
    import torch  # noqa: F401  (every strategy runs where a DataLoader worker would)

    if kind == "serve":
        serve(Path(argv[1]), int(argv[2]))
        return
    if kind == "client":
        result = child_server_client(int(argv[1]), int(argv[2]))
    else:
        fn = {"list": child_list, "rank-sharded": child_rank, "energon_lite": child_energon_lite}
        result = fn[kind](Path(argv[1]), int(argv[2]))
    print(json.dumps(result))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2:])
    else:
        main()
