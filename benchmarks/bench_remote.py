"""Training-loader throughput from an S3-protocol server: energon_lite vs local disk and Energon.

Data: the pipeline benchmark's W1 (``bench_pipeline.build_dataset``: 20,000 256x256 JPEG +
caption samples in tar shards of 1,000, prepared), uploaded once per run with boto3 to moto's
S3 server (``ThreadedMotoServer``) on 127.0.0.1. Every remote reader goes through a loopback
HTTP proxy (``energon_lite.synth.servers.FaultProxy``) that adds 0 or 20 ms to each request
and counts the requests. Readers, each in a fresh child process, 2 DataLoader workers:

* ``lite local``: energon_lite on the local folder (the reference);
* ``lite s3 +Xms``: energon_lite on ``s3://bench-w1/pipeline`` (AWS_ENDPOINT_URL = the proxy);
* ``energon s3 +Xms``: megatron-energon on ``msc://bench-w1/pipeline``, an MSC profile of type s3
  pointing at the proxy (Energon's own remote path).

Settings as bench_pipeline: batch 32, shuffle buffer 100, max_samples_per_sequence 100,
default TaskEncoders (float CHW images). samples/s over ``--batches`` after ``--warmup``;
requests per sample = the proxy's requests during the child / samples consumed (including
listing, metadata and index fetches). Rounds alternate the order (A/B); the tables show
medians over rounds, ratios are medians of per-round ratios, with min-max spread.

    python benchmarks/bench_remote.py [--rounds 3] [--batches 150] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from common import ab_order, fmt_num, markdown_table, median, ratio, run_child

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import (
    BATCH_SIZE,
    MAX_SAMPLES_PER_SEQUENCE,
    SHUFFLE_BUFFER,
    build_dataset,
)

WORKERS = 2
RESULT = "RESULT "
BUCKET, PREFIX = "bench-w1", "pipeline"


def child(args: argparse.Namespace) -> None:
    """One measurement: build the loader, time ``batches`` after ``warmup``."""
    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(1)
    if args.lib == "energon":
        import megatron.energon as me

        wc = me.WorkerConfig(rank=0, world_size=1, num_workers=WORKERS)
        ds = me.get_train_dataset(
            args.path, split_part="train", worker_config=wc, batch_size=BATCH_SIZE,
            shuffle_buffer_size=SHUFFLE_BUFFER, max_samples_per_sequence=MAX_SAMPLES_PER_SEQUENCE,
        )  # fmt: skip
        loader = me.get_savable_loader(ds)
    else:
        import energon_lite as el

        wc = el.WorkerConfig(rank=0, world_size=1, num_workers=WORKERS)
        ds = el.get_train_dataset(
            args.path, worker_config=wc, batch_size=BATCH_SIZE,
            shuffle_buffer_size=SHUFFLE_BUFFER, max_samples_per_sequence=MAX_SAMPLES_PER_SEQUENCE,
        )  # fmt: skip
        loader = el.get_savable_loader(ds)
    iterator = iter(loader)
    consumed = 0
    for _ in range(args.warmup):
        consumed += int(next(iterator).image.shape[0])
    start = time.perf_counter()
    timed = 0
    for _ in range(args.batches):
        timed += int(next(iterator).image.shape[0])
    seconds = time.perf_counter() - start
    print(RESULT + json.dumps({"samples_per_s": timed / seconds, "samples": consumed + timed}))
    sys.stdout.flush()
    os._exit(0)  # do not wait for the workers' prefetch to drain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=150)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--latencies", default="0,20", help="ms added per request")
    parser.add_argument("--quick", action="store_true", help="1 round, 40 batches")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--lib", default="energon_lite", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.quick:
        args.rounds, args.batches = 1, 40

    from energon_lite.synth.servers import TEST_CREDENTIALS, FaultProxy, S3Server, write_msc_config

    root = build_dataset(args.samples)
    latencies = [int(x) for x in args.latencies.split(",")]
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="bench-remote-"))
    with S3Server() as s3:
        print(f"uploading {root} to s3://{BUCKET}/{PREFIX} ...", file=sys.stderr)
        s3.upload(root, BUCKET, PREFIX)
        proxies = {ms: FaultProxy(s3.endpoint, delay=ms / 1000).__enter__() for ms in latencies}
        configs: list[tuple[str, str, str, int | None]] = [
            ("lite local", "energon_lite", str(root), None)
        ]
        for ms in latencies:
            configs.append((f"lite s3 +{ms}ms", "energon_lite", f"s3://{BUCKET}/{PREFIX}", ms))
            configs.append((f"energon s3 +{ms}ms", "energon", f"msc://{BUCKET}/{PREFIX}", ms))
        results: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in configs}
        for round_index in range(args.rounds):
            for name, lib, path, ms in ab_order(configs, round_index):
                env = dict(os.environ)
                env["ENERGON_LITE_CACHE_DIR"] = str(
                    tmp / f"cache-{round_index}-{len(results[name])}-{name.replace(' ', '_')}"
                )
                if ms is not None:
                    proxy = proxies[ms]
                    env.update(AWS_ENDPOINT_URL=proxy.endpoint, AWS_ACCESS_KEY_ID=TEST_CREDENTIALS["key"],
                               AWS_SECRET_ACCESS_KEY=TEST_CREDENTIALS["secret"], AWS_DEFAULT_REGION="us-east-1",
                               MSC_CONFIG=str(write_msc_config(tmp / "msc_config.yaml", BUCKET, proxy.endpoint, BUCKET)))  # fmt: skip
                    before = proxy.counts["requests"]
                cmd = [sys.executable, __file__, "--child", "--lib", lib, "--path", path,
                       "--batches", str(args.batches), "--warmup", str(args.warmup)]  # fmt: skip
                run = run_child(cmd, env=env, timeout=600)
                line = next((x for x in run.lines if x.startswith(RESULT)), None)
                if line is None:
                    print(f"{name}: failed\n{run.stderr[-2000:]}", file=sys.stderr)
                    results[name].append({})
                    continue
                result = json.loads(line[len(RESULT) :])
                if ms is not None:
                    result["requests"] = proxies[ms].counts["requests"] - before
                    result["requests_per_sample"] = result["requests"] / result["samples"]
                results[name].append(result)
                print(f"round {round_index} {name}: {result}", file=sys.stderr)
        for proxy in proxies.values():
            proxy.__exit__(None, None, None)
    report(args, configs, results, latencies, time.perf_counter() - started)


def _spread(values: list[float | None]) -> str:
    present = [v for v in values if v is not None]
    if not present:
        return "n/a"
    return f"{min(present):.2f}-{max(present):.2f}"


def report(args: argparse.Namespace, configs: list[Any], results: dict[str, list[dict[str, Any]]],
           latencies: list[int], seconds: float) -> None:  # fmt: skip
    print(
        f"W1 ({args.samples} samples of 256x256 JPEG + caption) from moto's S3 server on "
        f"127.0.0.1 through a latency proxy; batch {BATCH_SIZE}, {WORKERS} workers; "
        f"{args.rounds} rounds x {args.batches} timed batches after {args.warmup}; "
        f"{os.cpu_count()} CPUs; {seconds:.0f} s in all\n"
    )
    rows = []
    for name, *_ in configs:
        runs = results[name]
        rows.append([
            name,
            fmt_num(median([r.get("samples_per_s") for r in runs])),
            fmt_num(median([r.get("requests_per_sample") for r in runs]), 4) if "s3" in name else "-",
        ])  # fmt: skip
    print(markdown_table(["reader", "samples/s", "requests/sample"], rows))
    print()
    rows = []
    local = results["lite local"]
    for ms in latencies:
        lite, energon = results[f"lite s3 +{ms}ms"], results[f"energon s3 +{ms}ms"]
        vs_local = [
            ratio(a.get("samples_per_s"), b.get("samples_per_s")) for a, b in zip(lite, local)
        ]
        vs_energon = [
            ratio(a.get("samples_per_s"), b.get("samples_per_s")) for a, b in zip(lite, energon)
        ]
        rows.append([f"+{ms} ms", fmt_num(median(vs_local), 2, "x"), _spread(vs_local),
                     fmt_num(median(vs_energon), 2, "x"), _spread(vs_energon)])  # fmt: skip
    print(markdown_table(
        ["latency", "lite s3 / lite local", "spread", "lite s3 / energon s3", "spread"], rows
    ))  # fmt: skip


if __name__ == "__main__":
    main()
