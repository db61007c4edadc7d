"""The node-local shard cache: GETs and bytes per epoch, sharing, eviction, warm-epoch speed.

Data: ``--samples`` 256x256 JPEG + caption samples (W1's kind, ``bench_pipeline``) in shards of
``--per-shard``, prepared locally and uploaded with boto3 to moto's S3 server
(``ThreadedMotoServer``) on 127.0.0.1. Each measurement is a fresh child process; the child
starts its own counting proxy (``energon_lite.synth.servers.FaultProxy``, whose ``log`` holds
every request and the bytes answered) in front of the server, so GETs of shard data
(``*.tar``) and their bytes are counted per epoch of that child. 2 DataLoader workers, batch
32, shuffle buffer 100, ``max_samples_per_sequence`` 100, default TaskEncoders.

1. cold vs warm: one child, 3 training epochs on an empty cache (limit: 2x the data).
2. 4 processes: 4 children at once, one validation pass each, sharing one empty cache,
   counted by one proxy in the parent.
3. limit at half the data: one child, 4 training epochs; the bytes fetched per epoch are
   compared with an LRU of whole objects of the same limit replayed over the order in which
   a run without a cache first asked for each object in each epoch, and with the lower
   bound ``data - limit`` (no cache of that size fetches less in an epoch that reads all).
4. warm-epoch samples/s: ``local`` (the prepared folder) against ``s3 cached`` (the bucket
   through a warmed cache), alternated (A/B) over ``--rounds``; samples/s over ``--batches``
   after ``--warmup`` batches.

    python benchmarks/bench_cache.py [--rounds 3] [--samples 8000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ab_order, fmt_bytes, fmt_num, markdown_table, median, ratio, run_child

WORKERS = 2
BATCH, SHUFFLE, SEQUENCE = 32, 100, 100
RESULT = "RESULT "
BUCKET, PREFIX = "bench-cache", "w1"


def _shard_requests(log: list[tuple[str, str, int, int]], since: int) -> tuple[int, int, list]:
    """GETs of ``*.tar`` objects since ``since``: count, bytes, and the objects in order."""
    gets, nbytes, order = 0, 0, []
    for method, path, _, size in log[since:]:
        name = path.split("?", 1)[0]
        if method == "GET" and name.endswith(".tar"):
            gets, nbytes = gets + 1, nbytes + size
            order.append(name)
    return gets, nbytes, order


def child(args: argparse.Namespace) -> None:
    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(1)
    import energon_lite as el
    from energon_lite.synth.servers import FaultProxy

    proxy = None
    if args.upstream:
        proxy = FaultProxy(args.upstream).__enter__()
        os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
    wc = el.WorkerConfig(rank=0, world_size=1, num_workers=WORKERS)
    if args.mode == "val":
        ds = el.get_val_dataset(args.path, worker_config=wc, batch_size=BATCH, split_part="train")
        seen = sum(int(b.image.shape[0]) for b in el.get_savable_loader(ds))
        print(RESULT + json.dumps({"samples": seen}))
        sys.stdout.flush()
        os._exit(0)
    ds = el.get_train_dataset(
        args.path, worker_config=wc, batch_size=BATCH, shuffle_buffer_size=SHUFFLE,
        max_samples_per_sequence=SEQUENCE,
    )  # fmt: skip
    iterator = iter(el.get_savable_loader(ds))
    if args.mode == "rate":
        for _ in range(args.warmup):
            next(iterator)
        start, timed = time.perf_counter(), 0
        for _ in range(args.batches):
            timed += int(next(iterator).image.shape[0])
        rate = timed / (time.perf_counter() - start)
        print(RESULT + json.dumps({"samples_per_s": rate}))
        sys.stdout.flush()
        os._exit(0)
    assert proxy is not None
    epochs, consumed, mark = [], 0, 0
    for epoch in range(args.epochs):
        start = time.perf_counter()
        while consumed < (epoch + 1) * args.samples:
            consumed += int(next(iterator).image.shape[0])
        gets, nbytes, order = _shard_requests(proxy.log, mark)
        mark = len(proxy.log)
        epochs.append({"gets": gets, "bytes": nbytes, "seconds": time.perf_counter() - start,
                       "order": order if args.record_order else []})  # fmt: skip
    print(RESULT + json.dumps({"epochs": epochs}))
    sys.stdout.flush()
    os._exit(0)


def lru_bytes(order: list[str], sizes: dict[str, int], limit: int) -> int:
    """Bytes an LRU of ``limit`` bytes of whole objects fetches for ``order``."""
    held: OrderedDict[str, int] = OrderedDict()
    fetched = 0
    for name in order:
        if name in held:
            held.move_to_end(name)
            continue
        fetched += sizes[name]
        held[name] = sizes[name]
        while sum(held.values()) > limit:
            held.popitem(last=False)
    return fetched


def _accesses(order: list[str]) -> list[str]:
    """The objects of one epoch in the order they were first asked for (a worker opens an
    entry once and reads its slices from it)."""
    return list(dict.fromkeys(order))


def build(samples: int, per_shard: int, root: Path) -> Path:
    if (root / ".nv-meta" / "split.yaml").exists():
        return root
    from energon_lite import prepare_dataset
    from energon_lite.synth.shards import write_captioning_shards

    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    write_captioning_shards(tmp, samples, per_shard, image_size=(256, 256))
    prepare_dataset(tmp, split_ratio=[("train", 1)], sample_type="CaptioningSample",
                    field_map={"image": "jpg", "caption": "txt"}, progress=False)  # fmt: skip
    tmp.rename(root)
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=8000)
    parser.add_argument("--per-shard", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--data", default=str(Path(tempfile.gettempdir()) / "bench-cache-data"))
    parser.add_argument("--phases", default="1,2,3,4", help="which of the 4 measurements")
    parser.add_argument("--quick", action="store_true", help="1 round, 30 batches")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="rate", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--upstream", default="", help=argparse.SUPPRESS)
    parser.add_argument("--epochs", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--record-order", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.quick:
        args.rounds, args.batches = 1, 30
    from energon_lite.synth.servers import TEST_CREDENTIALS, S3Server

    root = build(args.samples, args.per_shard, Path(args.data) / f"w1_{args.samples}")
    sizes = {p.relative_to(root).as_posix(): p.stat().st_size for p in root.glob("**/*.tar")}
    total = sum(sizes.values())
    tmp = Path(tempfile.mkdtemp(prefix="bench-cache-"))
    started, load = time.perf_counter(), os.getloadavg()
    url = f"s3://{BUCKET}/{PREFIX}"
    out: dict[str, Any] = {}
    with S3Server() as s3:
        s3.upload(root, BUCKET, PREFIX)
        base_env = dict(os.environ, AWS_ACCESS_KEY_ID=TEST_CREDENTIALS["key"],
                        AWS_SECRET_ACCESS_KEY=TEST_CREDENTIALS["secret"],
                        AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=s3.endpoint)  # fmt: skip

        def env(cache: str, limit: int | None) -> dict[str, str]:
            e = dict(base_env, ENERGON_LITE_CACHE_DIR=str(tmp / cache))
            if limit is not None:
                e["ENERGON_LITE_CACHE_LIMIT"] = str(limit)
            else:
                e.pop("ENERGON_LITE_CACHE_LIMIT", None)
            return e

        def run(cmd_extra: list[str], e: dict[str, str]) -> dict[str, Any]:
            cmd = [sys.executable, __file__, "--child", "--path", url, "--upstream", s3.endpoint,
                   "--samples", str(args.samples), *cmd_extra]  # fmt: skip
            result = run_child(cmd, env=e, timeout=900)
            line = next((x for x in result.lines if x.startswith(RESULT)), None)
            if line is None:
                raise RuntimeError(result.stderr[-3000:])
            return json.loads(line[len(RESULT) :])

        phases = {int(x) for x in args.phases.split(",")}
        # 1. cold vs warm
        if 1 in phases:
            out["cold_warm"] = run(["--mode", "epochs", "--epochs", "3"], env("c1", 2 * total))
            print("cold/warm", out["cold_warm"], file=sys.stderr)
        # 2. four processes sharing one cache, through one counting proxy (an entry is named
        # by the endpoint too, so all four must use the same one)
        if 2 in phases:
            from energon_lite.synth.servers import FaultProxy

            with FaultProxy(s3.endpoint) as proxy:
                cmd = [sys.executable, __file__, "--child", "--mode", "val", "--path", url]
                e = dict(env("c2", 2 * total), AWS_ENDPOINT_URL=proxy.endpoint)
                procs = [subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, text=True)
                         for _ in range(4)]  # fmt: skip
                shared = []
                for p in procs:
                    stdout, _ = p.communicate(timeout=900)
                    line = next(x for x in stdout.splitlines() if x.startswith(RESULT))
                    shared.append(json.loads(line[len(RESULT) :]))
                gets, nbytes, _ = _shard_requests(proxy.log, 0)
            out["shared"] = {
                "samples": [x["samples"] for x in shared],
                "gets": gets,
                "bytes": nbytes,
            }
            print("shared", out["shared"], file=sys.stderr)
        # 3. limit at half the data, against LRU replayed on the uncached run's order
        if 3 in phases:
            limit = total // 2
            plain = run(["--mode", "epochs", "--epochs", "4", "--record-order"], env("c3a", None))
            half = run(["--mode", "epochs", "--epochs", "4"], env("c3b", limit))
            prefix = f"/{BUCKET}/{PREFIX}/"
            order = [n[len(prefix) :] for e in plain["epochs"] for n in _accesses(e["order"])]
            replay, seen = [], 0
            for e in plain["epochs"]:
                n = len(_accesses(e["order"]))
                before = lru_bytes(order[:seen], sizes, limit)
                replay.append(lru_bytes(order[: seen + n], sizes, limit) - before)
                seen += n
            out["half"] = {"limit": limit, "plain": plain["epochs"], "cached": half["epochs"],
                           "lru": replay}  # fmt: skip
            print("half", out["half"]["cached"], replay, file=sys.stderr)
        # 4. warm-epoch samples/s vs local disk
        if 4 in phases:
            run(["--mode", "val"], env("c4", 2 * total))  # warm the cache
            configs = [("local", str(root)), ("s3 cached", url)]
            rates: dict[str, list[float | None]] = {name: [] for name, _ in configs}
            for r in range(args.rounds):
                for name, path in ab_order(configs, r):
                    cmd = [sys.executable, __file__, "--child", "--mode", "rate", "--path", path,
                           "--batches", str(args.batches), "--warmup", str(args.warmup)]  # fmt: skip
                    result = run_child(cmd, env=env("c4", 2 * total), timeout=900)
                    line = next((x for x in result.lines if x.startswith(RESULT)), None)
                    rates[name].append(
                        json.loads(line[len(RESULT) :])["samples_per_s"] if line else None
                    )
                    print(f"round {r} {name}: {rates[name][-1]}", file=sys.stderr)
            out["rates"] = rates
    shutil.rmtree(tmp, ignore_errors=True)
    report(args, out, sizes, total, load, time.perf_counter() - started)


def report(args: argparse.Namespace, out: dict[str, Any], sizes: dict[str, int], total: int,
           load: tuple[float, float, float], seconds: float) -> None:  # fmt: skip
    print(
        f"{args.samples} samples of 256x256 JPEG + caption in {len(sizes)} shards "
        f"({fmt_bytes(total)}) on moto's S3 server on 127.0.0.1; batch {BATCH}, {WORKERS} "
        f"workers; {os.cpu_count()} CPUs, load average at start {load[0]:.1f}; "
        f"{seconds:.0f} s in all\n"
    )
    if "cold_warm" in out:
        rows = [[f"{i + 1}", str(e["gets"]), fmt_bytes(e["bytes"]), f"{e['bytes'] / total:.2f}"]
                for i, e in enumerate(out["cold_warm"]["epochs"])]  # fmt: skip
        print("Cold and warm epochs (one process, limit 2x the data):\n")
        print(markdown_table(["epoch", "shard GETs", "shard bytes", "bytes / data"], rows))
    if "shared" in out:
        shared = out["shared"]
        gets, nbytes = shared["gets"], shared["bytes"]
        print(f"\n4 processes at once, one cold cache, one pass each: {gets} shard GETs for "
              f"{len(sizes)} objects, {fmt_bytes(nbytes)} ({nbytes / total:.2f}x the data); "
              f"samples per process {shared['samples']}\n")  # fmt: skip
    if "half" in out:
        half = out["half"]
        print(f"Limit at half the data ({fmt_bytes(half['limit'])}), 4 epochs:\n")
        rows = []
        for i, (plain, cached, lru) in enumerate(zip(half["plain"], half["cached"], half["lru"])):
            rows.append([f"{i + 1}", fmt_bytes(plain["bytes"]), fmt_bytes(cached["bytes"]),
                         fmt_bytes(lru), fmt_bytes(max(0, total - half["limit"]))])  # fmt: skip
        print(
            markdown_table(["epoch", "no cache", "cache", "LRU replay", "bound data-limit"], rows)
        )
    if "rates" in out:
        rates = out["rates"]
        ratios = [ratio(a, b) for a, b in zip(rates["s3 cached"], rates["local"])]
        present = [r for r in ratios if r is not None]
        spread = f"{min(present):.2f}-{max(present):.2f}" if present else "n/a"
        print(f"\nWarm-epoch samples/s ({args.rounds} rounds A/B, {args.batches} batches after "
              f"{args.warmup}):\n")  # fmt: skip
        print(markdown_table(
            ["reader", "samples/s", "s3 cached / local", "spread"],
            [["local", fmt_num(median(rates["local"])), "", ""],
             ["s3 cached", fmt_num(median(rates["s3 cached"])), fmt_num(median(ratios), 2, "x"),
              spread]],
        ))  # fmt: skip


if __name__ == "__main__":
    main()
