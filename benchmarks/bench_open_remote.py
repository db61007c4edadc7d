"""What opening a remote dataset costs: requests to the store, and calls from ``shards/`` into
``storage/``.

Data: a captioning dataset of 120 samples in 6 shards, prepared, uploaded to moto's S3 server
on 127.0.0.1; every request goes through the counting proxy
(``energon_lite.synth.servers.FaultProxy``). Each way of opening runs in a fresh child process
(nothing read before), and counts:

* ``requests``: HTTP requests the proxy forwarded while the dataset was opened (listings,
  metadata, indexes; no sample is read);
* ``I/O calls``: calls from a function of ``energon_lite/shards/`` into a function of
  ``energon_lite/storage/`` that may read (``exists``, ``read_bytes``, ``size``, ``version``...;
  counted with ``sys.setprofile``), the round trips between the two layers; ``all such
  calls`` adds path arithmetic (``/``, ``as_path``) and bookkeeping.

Ways of opening: ``split`` (one split: the tar folder's Source), ``dataset`` (``get_train_dataset``
on the URL), ``metadataset`` (``get_train_dataset`` on a local metadataset YAML naming the
URL twice, in a blend) and ``factory`` (Energon's ``CaptioningWebdataset`` factory, then its
``build()``).

    python benchmarks/bench_open_remote.py
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from common import markdown_table

WAYS = ("split", "dataset", "metadataset", "factory")
RESULT = "RESULT "
# the storage functions that may read (all but path arithmetic and bookkeeping)
_IO = {"exists", "is_file", "is_dir", "read_bytes", "read_text", "read_range", "read_range_all",
       "read_if_present", "read_span", "edges", "size", "stat", "version", "info",
       "fresh_listing", "list_files", "local_copy", "downloaded"}  # fmt: skip
BUCKET, PREFIX = "bench-open", "ds"


def _open(way: str, url: str, scratch: Path) -> None:
    from energon_lite import WorkerConfig, get_train_dataset

    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    options: dict[str, Any] = {"batch_size": 4, "shuffle_buffer_size": 10}
    options["max_samples_per_sequence"] = 10
    if way == "split":
        from energon_lite.sources.kinds import open_source
        from energon_lite.sources.leaf import Leaf
        from energon_lite.storage import as_path

        open_source(Leaf(as_path(url), "train"))
    elif way == "dataset":
        get_train_dataset(url, worker_config=wc, **options)
    elif way == "metadataset":
        yaml_path = scratch / "blend.yaml"
        yaml_path.write_text(
            "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
            f"    blend:\n      - weight: 1\n        path: {url}\n"
            f"      - weight: 2\n        path: {url}\n"
        )
        get_train_dataset(yaml_path, worker_config=wc, **options)
    else:
        from energon_lite.compat.webdataset_factories import CaptioningWebdataset

        CaptioningWebdataset(url, worker_config=wc).build()


def child(args: argparse.Namespace) -> None:
    from energon_lite.synth.servers import FaultProxy

    shards = os.sep + os.path.join("energon_lite", "shards") + os.sep
    storage = os.sep + os.path.join("energon_lite", "storage") + os.sep
    calls: Counter[str] = Counter()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and storage in frame.f_code.co_filename:
            caller = frame.f_back
            if caller is not None and shards in caller.f_code.co_filename:
                calls[frame.f_code.co_qualname] += 1

    with FaultProxy(args.endpoint) as proxy, tempfile.TemporaryDirectory() as scratch:
        os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
        os.environ["ENERGON_LITE_CACHE_DIR"] = os.path.join(scratch, "cache")
        sys.setprofile(profile)
        try:
            _open(args.way, f"s3://{BUCKET}/{PREFIX}", Path(scratch))
        finally:
            sys.setprofile(None)
        if args.verbose:
            print(calls.most_common(), file=sys.stderr)
        io = sum(n for name, n in calls.items() if name.split(".")[-1] in _IO)
        found = {"requests": len(proxy.log), "calls": sum(calls.values()), "io": io}
        print(RESULT + json.dumps(found), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--way", choices=WAYS, help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--verbose", action="store_true", help="name the calls of each way")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from conftest import make_dataset

    from energon_lite.synth.servers import TEST_CREDENTIALS, S3Server

    os.environ.update(
        AWS_ACCESS_KEY_ID=TEST_CREDENTIALS["key"],
        AWS_SECRET_ACCESS_KEY=TEST_CREDENTIALS["secret"],
        AWS_DEFAULT_REGION="us-east-1",
    )
    rows = []
    with S3Server() as server, tempfile.TemporaryDirectory() as scratch:
        server.upload(make_dataset(Path(scratch) / "ds"), BUCKET, PREFIX)
        for way in WAYS:
            command = [sys.executable, __file__, "--child", "--way", way]
            command += ["--verbose"] if args.verbose else []
            out = subprocess.run(
                [*command, "--endpoint", server.endpoint],
                check=True,
                stdout=subprocess.PIPE,
                text=True,
            ).stdout
            line = next(x for x in out.splitlines() if x.startswith(RESULT))
            found = json.loads(line[len(RESULT) :])
            rows.append([way, found["requests"], found["io"], found["calls"]])
    headers = ["opened as", "requests", "shards -> storage I/O calls", "all such calls"]
    print(markdown_table(headers, rows))


if __name__ == "__main__":
    main()
