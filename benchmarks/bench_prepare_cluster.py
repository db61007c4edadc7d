"""``prepare`` of 5,000 small shards on an S3-protocol server: Ray workers against one process
and against ``energon prepare``.

Data: bench_prepare's shards (``--shards`` 5,000 tar shards of ``--per-shard`` 20 samples, a
``.txt`` and a ``.json`` each), uploaded once with boto3 to moto's S3 server
(``ThreadedMotoServer``, in this process) on 127.0.0.1, bucket ``bench-prepare``. Each run
is a fresh CLI process with bench_prepare's options (``--split-ratio 8,1,1 --sample-type
TextSample --field-map '{"text": "txt"}' --non-interactive --force-overwrite``):

* ``lite process 1``: ``energon-lite prepare s3://bench-prepare/src --num-workers 1``;
* ``lite ray N`` (N = 1, 2, 4): ``... --executor ray --num-workers N``: a local Ray started
  by the prepare with N CPUs (its start-up is in the time), N scan tasks at a time;
* ``energon N``: ``energon prepare msc://bench-prepare/src --num-workers N``, an MSC profile
  of type s3 pointing at the same server (Energon's own remote path).

Between runs the indexes, ``.nv-meta`` and any journal are deleted from the bucket (not
timed). Rounds alternate the order; reported: median wall seconds and spread per run, and
the load average before each round (the machine is shared).

``--breakdown`` first measures where a prepare's time can go, on the same server: moto's
cost per request (a GET of one whole shard, a PUT of one ``.tar.idx``-sized object, a HEAD,
each 200 times from one client; a full listing of the prefix), and a local Ray's start and
stop (``ray.init(num_cpus=2)`` + ``ray.shutdown()`` in a fresh process, import included).

    python benchmarks/bench_prepare_cluster.py [--rounds 2] [--shards 5000] [--ray 1,2,4]
        [--breakdown]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_prepare import OPTIONS, build
from common import ab_order, markdown_table, median

HERE = Path(__file__).resolve().parent
BUCKET, PREFIX = "bench-prepare", "src"


def upload(server, source: Path) -> None:
    client = server.client()
    client.create_bucket(Bucket=BUCKET)
    for tar in sorted(source.rglob("*.tar")):
        client.upload_file(str(tar), BUCKET, f"{PREFIX}/{tar.relative_to(source).as_posix()}")


def clean(server) -> int:
    """Delete everything but the shards; return how many shards are there."""
    client = server.client()
    shards, doomed, token = 0, [], None
    while True:
        kwargs = {"Bucket": BUCKET, "Prefix": PREFIX + "/"}
        if token:
            kwargs["ContinuationToken"] = token
        page = client.list_objects_v2(**kwargs)
        for item in page.get("Contents", []):
            if item["Key"].endswith(".tar"):
                shards += 1
            else:
                doomed.append({"Key": item["Key"]})
        if not page.get("IsTruncated"):
            break
        token = page["NextContinuationToken"]
    for i in range(0, len(doomed), 1000):
        client.delete_objects(Bucket=BUCKET, Delete={"Objects": doomed[i : i + 1000]})
    return shards


RAY_START = r"""
import time
t0 = time.perf_counter()
import ray
t1 = time.perf_counter()
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
t2 = time.perf_counter()
ray.shutdown()
t3 = time.perf_counter()
print(f"{t1 - t0:.2f} {t2 - t1:.2f} {t3 - t2:.2f}")
"""


def breakdown(server, env: dict[str, str], count: int = 200) -> None:
    """moto's seconds per request of each kind a prepare sends, and a local Ray's start."""
    client = server.client()
    key = client.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX + "/", MaxKeys=1)["Contents"][0]
    name, size = key["Key"], key["Size"]
    body = b"\0" * 168  # a .tar.idx of 20 samples

    def each(what: str, call) -> None:
        start = time.perf_counter()
        for i in range(count):
            call(i)
        ms = (time.perf_counter() - start) / count * 1000
        print(f"moto {what}: {ms:.1f} ms per request (load {os.getloadavg()[0]:.1f})", flush=True)

    each(
        f"GET of a {size:,}-byte shard",
        lambda i: client.get_object(Bucket=BUCKET, Key=name)["Body"].read(),
    )
    each("HEAD", lambda i: client.head_object(Bucket=BUCKET, Key=name))
    each(
        "PUT of 168 bytes",
        lambda i: client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/x/{i}.idx", Body=body),
    )
    client.delete_objects(
        Bucket=BUCKET, Delete={"Objects": [{"Key": f"{PREFIX}/x/{i}.idx"} for i in range(count)]}
    )
    start, pages = time.perf_counter(), 0
    for _page in client.get_paginator("list_objects_v2").paginate(
        Bucket=BUCKET, Prefix=PREFIX + "/"
    ):
        pages += 1
    print(
        f"moto listing of the prefix: {time.perf_counter() - start:.2f} s ({pages} pages)",
        flush=True,
    )
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", RAY_START], capture_output=True, text=True,
                              env=env, timeout=600)  # fmt: skip
        if done.returncode != 0:
            print(f"ray start failed: {done.stderr[-2000:]}", flush=True)
            return
        imported, init, shutdown = done.stdout.split()
        print(f"ray: import {imported} s, init(num_cpus=2) {init} s, shutdown {shutdown} s "
              f"(load {os.getloadavg()[0]:.1f})", flush=True)  # fmt: skip


def command(run: str) -> list[str]:
    tool, executor, workers = run.split()
    if tool == "energon":
        exe = [
            str(Path(sys.executable).with_name("energon")),
            "prepare",
            f"msc://{BUCKET}/{PREFIX}",
        ]
    else:
        exe = [sys.executable, "-m", "energon_lite.cli", "prepare", f"s3://{BUCKET}/{PREFIX}"]
        if executor == "ray":
            exe += ["--executor", "ray"]
    return [*exe, *OPTIONS, "--num-workers", workers]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--shards", type=int, default=5000)
    parser.add_argument("--per-shard", type=int, default=20)
    parser.add_argument("--ray", default="1,2,4", help="Ray worker counts")
    parser.add_argument("--energon-workers", type=int, default=2)
    parser.add_argument("--breakdown", action="store_true", help="per-request and Ray start costs")
    args = parser.parse_args()
    from energon_lite.synth.servers import TEST_CREDENTIALS, S3Server, write_msc_config

    started = time.perf_counter()
    source = build(args.shards, args.per_shard)
    runs = ["lite process 1", *(f"lite ray {n}" for n in args.ray.split(","))]
    runs.append(f"energon process {args.energon_workers}")
    times: dict[str, list[float]] = {run: [] for run in runs}
    loads: list[float] = []
    with S3Server() as server, tempfile.TemporaryDirectory() as tmp:
        upload(server, source)
        print(f"uploaded {args.shards} shards in {time.perf_counter() - started:.0f} s", flush=True)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")])
            ),
            "AWS_ENDPOINT_URL": server.endpoint,
            "AWS_ACCESS_KEY_ID": TEST_CREDENTIALS["key"],
            "AWS_SECRET_ACCESS_KEY": TEST_CREDENTIALS["secret"],
            "AWS_DEFAULT_REGION": "us-east-1",
            "MSC_CONFIG": str(
                write_msc_config(Path(tmp) / "msc_config.yaml", BUCKET, server.endpoint, BUCKET)
            ),
            "ENERGON_LITE_CACHE_DIR": str(Path(tmp, "cache")),
        }
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.pop("RAY_ADDRESS", None)
        if args.breakdown:
            breakdown(server, env)
        for round_index in range(args.rounds):
            loads.append(os.getloadavg()[0])
            for run in ab_order(runs, round_index):
                assert clean(server) == args.shards
                start = time.perf_counter()
                done = subprocess.run(
                    command(run),
                    capture_output=True,
                    text=True,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    timeout=3600,
                )
                seconds = time.perf_counter() - start
                if done.returncode != 0:
                    raise RuntimeError(f"{run} failed ({done.returncode}):\n{done.stderr[-3000:]}")
                times[run].append(seconds)
                print(
                    f"round {round_index + 1} {run}: {seconds:.1f} s (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
    print(
        f"\n{args.shards:,} shards x {args.per_shard} samples on moto (127.0.0.1); {args.rounds} "
        f"rounds, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, load average "
        f"{min(loads):.1f}-{max(loads):.1f} before the rounds; "
        f"{time.perf_counter() - started:.0f} s in all\n"
    )
    base = median(times["lite process 1"])
    rows = [
        [
            run,
            f"{median(times[run]):.1f} s",
            f"{min(times[run]):.1f}-{max(times[run]):.1f} s",
            f"{base / median(times[run]):.2f}x",
        ]
        for run in runs
    ]
    print(markdown_table(["prepare", "median", "spread (min-max)", "vs lite process 1"], rows))
    print(json.dumps(times))


if __name__ == "__main__":
    main()
    os._exit(0)
