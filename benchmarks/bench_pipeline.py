"""Training-loader throughput of energon_lite against megatron-energon 7.x and plain torch.

Dataset: ``--samples`` (20,000) real 256x256 JPEGs + captions in tar shards of 1,000,
written with ``energon_lite.synth`` and prepared once (``.nv-meta``, ``.tar.idx``) under
``benchmarks/data/`` (git-ignored). The same folder is read by all three loaders:

* ``energon_lite``: ``get_train_dataset`` + ``get_savable_loader``, default TaskEncoder
  (``SampleDecoder(image_decode="torchrgb")``: float CHW tensors in [0, 1]);
* ``energon``: megatron-energon's ``get_train_dataset`` + ``get_savable_loader``, default
  TaskEncoder, whose default decoder is also ``SampleDecoder(image_decode="torchrgb")``;
* ``torch``: a plain map-style ``torch.utils.data.Dataset`` that reads one sample per
  ``__getitem__`` with ``os.pread`` at the ``.tar.idx`` offsets, decodes the JPEG with
  Pillow into a float CHW tensor in [0, 1], in a ``DataLoader(batch_size=32, shuffle=True)``.

Extra rows (issue 17): ``energon_lite_u8`` (``SampleDecoder(image_decode="torchrgb8")``:
uint8 batches), ``energon_lite_u8n`` (the same, normalised with ``normalize_batch`` on the
CPU in the trainer), ``limit``: as many processes as workers (one for 0) that only read
and decode the same samples to float CHW, the decoder's limit on the machine, and
``limit_u8``: the same decoding to uint8 CHW (``torchrgb8``), the uint8 path's limit;
``limit_u8 / energon_lite`` bounds what any uint8 loader can gain over the float one.
``limit_mem``: ``limit``, but each image decoded into its row of a batch in reused
shared-memory buffers (three per process, one freed as each batch is made: what the
loader's workers write, and what the trainer reads), where ``limit`` decodes into a
scratch tensor that stays in the CPU cache: the part of the gap to ``limit`` that comes
from delivering the batches in memory, not from the pipeline.

``energon_lite_pil`` and ``limit_pil``: ``energon_lite`` and ``limit`` with JPEGs decoded by
Pillow (``ENERGON_LITE_JPEG_DECODER=pillow``) where simplejpeg (the ``jpeg`` extra) is
installed, so both decoders are measured in the same run; without simplejpeg both pairs
decode with Pillow.

Settings: batch 32, shuffle buffer 100, max_samples_per_sequence 100, num_workers 0 and 2.

Each measurement runs in a fresh child process (so memory peaks and first batches do not
inherit from the previous run) and reports:

* time to first batch: from building the dataset to receiving the first batch (modules are
  imported before the clock starts, energon_lite's dataset-kind discovery included);
* samples/s: ``--batches`` batches timed after ``--warmup`` batches;
* peak memory: RSS summed over the child and its DataLoader workers (sampled every 50 ms by
  the parent with psutil) during the throughput phase;
* state size: energon_lite's ``save_state_rank()`` as msgpack; Energon's
  ``SavableDataLoaderState`` as ``torch.save`` bytes (pickle bytes alongside);
* restore to first batch: the state saved after warm-up + ``--batches`` batches (mid-epoch)
  is restored into a newly built dataset and loader; the time from building them to the
  first batch (for Energon this includes its workers' replay since their last internal
  checkpoint). The restored first batch is checked against the batch the original loader
  would have given next.

Rounds alternate the order of the loaders (A/B, rotated and reversed) on this small noisy
machine; the table shows medians over rounds and the medians of per-round ratios.

    python benchmarks/bench_pipeline.py [--samples 20000] [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import pickle
import platform
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from common import (
    ab_order,
    cache_bytecode,
    fmt_bytes,
    fmt_num,
    markdown_table,
    median,
    ratio,
    run_child,
)

DATA = Path(__file__).resolve().parent / "data"
LIBS = ("energon_lite", "energon", "torch")
# extra rows: energon_lite with uint8 images (SampleDecoder("torchrgb8")), and the decode
# limit: as many processes as workers (one for 0) that only read and decode the samples
# (and "energon_lite_u8n": the same, normalised with normalize_batch on the CPU in the
# trainer's process, the worst case when no GPU takes that step)
# ("limit_u8": the same decoding to uint8 CHW, the bound of any uint8 loader)
UINT8 = ("energon_lite_u8", "energon_lite_u8n", "limit_u8")
# "_pil" rows: the same with JPEGs decoded by Pillow (ENERGON_LITE_JPEG_DECODER=pillow) where
# simplejpeg (the jpeg extra) is installed: both decoders in the same run
PILLOW = ("energon_lite_pil", "limit_pil")
PEERS = {0: (*LIBS, "limit", *PILLOW), 2: (*LIBS, *UINT8, "limit", "limit_mem", *PILLOW)}
CHILDREN = (*LIBS, *UINT8, "limit", "limit_mem", *PILLOW)
LIMIT_MODES = {
    "limit": "torchrgb",
    "limit_u8": "torchrgb8",
    "limit_mem": "torchrgb",
    "limit_pil": "torchrgb",
}
IN_FLIGHT = 2  # limit_mem: batches a process's trainer side holds before one is freed
WORKERS = (0, 2)
BATCH_SIZE = 32
SHUFFLE_BUFFER = 100
MAX_SAMPLES_PER_SEQUENCE = 100
SAMPLES_PER_SHARD = 1000
MARK = "--- end of throughput phase ---"
RESULT = "RESULT "


# dataset --------------------------------------------------------------------------------


def build_dataset(num_samples: int) -> Path:
    """The prepared dataset of ``num_samples`` samples, built on first use (atomically)."""
    root = DATA / f"pipeline_{num_samples}"
    if (root / ".nv-meta" / "split.yaml").exists():
        return root
    from energon_lite import prepare_dataset
    from energon_lite.synth.shards import write_captioning_shards

    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"building {num_samples} samples under {root} ...", file=sys.stderr)
    write_captioning_shards(tmp, num_samples, SAMPLES_PER_SHARD, image_size=(256, 256))
    prepare_dataset(
        tmp,
        split_ratio=[("train", 1)],
        sample_type="CaptioningSample",
        field_map={"image": "jpg", "caption": "txt"},
        progress=False,
    )
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    return root


# the plain torch peer ---------------------------------------------------------------------


class PlainTarDataset:
    """Map-style dataset: sample i = one ``pread`` at its ``.tar.idx`` offsets + Pillow decode.

    Only ustar/GNU headers are parsed (what ``tarfile`` writes for short names), which is
    what a hand-written reader over these shards would do.
    """

    def __init__(self, root: Path) -> None:
        import numpy as np
        import yaml

        split = yaml.safe_load((root / ".nv-meta" / "split.yaml").read_text())
        self.paths = [str(root / name) for name in split["split_parts"]["train"]]
        self.items: list[tuple[int, int, int]] = []
        for shard, path in enumerate(self.paths):
            offsets = np.fromfile(path + ".idx", dtype="<u8").tolist()
            self.items += [(shard, a, b) for a, b in itertools.pairwise(offsets)]
        self._fds: dict[int, int] = {}
        self._pid = os.getpid()

    def __len__(self) -> int:
        return len(self.items)

    def _fd(self, shard: int) -> int:
        if os.getpid() != self._pid:  # a forked worker opens its own files
            self._fds, self._pid = {}, os.getpid()
        if shard not in self._fds:
            self._fds[shard] = os.open(self.paths[shard], os.O_RDONLY)
        return self._fds[shard]

    def read_parts(self, index: int) -> dict[str, bytes]:
        """The parts of sample ``index``: one ``pread`` and a minimal tar header walk."""
        shard, start, end = self.items[index]
        buf = os.pread(self._fd(shard), end - start, start)
        parts: dict[str, bytes] = {}
        pos = 0
        while pos + 512 <= len(buf):
            header = buf[pos : pos + 512]
            name = header[:100].split(b"\0", 1)[0].decode()
            if not name:
                break
            size = int(header[124:136].strip(b" \0") or b"0", 8)
            data = buf[pos + 512 : pos + 512 + size]
            pos += 512 + (size + 511) // 512 * 512
            if header[156:157] in (b"0", b"\0"):
                parts[name.split(".", 1)[1]] = data
        return parts

    def __getitem__(self, index: int) -> dict[str, Any]:
        import numpy as np
        import torch
        from PIL import Image

        parts = self.read_parts(index)
        with Image.open(io.BytesIO(parts["jpg"])) as img:
            array = np.asarray(img.convert("RGB"))
        image = torch.from_numpy(array.transpose(2, 0, 1).copy()).float().div_(255.0)
        return {"image": image, "caption": parts["txt"].decode("utf-8")}


# one measurement, in a child process ------------------------------------------------------

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _limit_process(
    root: Path,
    mode: str,
    memory: Any,
    process: int,
    indices: list[int],
    warmup: int,
    barrier: Any,
    results: Any,
) -> None:
    """Read and decode ``indices`` (after ``warmup`` untimed ones) to image ``mode``:
    the decoder's limit. With ``memory`` (a ``BatchMemoryPool``), every ``BATCH_SIZE``
    images are decoded into the rows of one of its segments, as a loader worker does
    (``energon_lite.batching.slab``), and a batch's segment is freed ``IN_FLIGHT`` batches
    later, as the trainer's process frees it."""
    import collections
    import contextlib

    import torch

    from energon_lite.batching.slab import SlabScope
    from energon_lite.decode.image import decode_image

    torch.set_num_threads(1)
    dataset = PlainTarDataset(root)
    if memory is not None:
        memory.activate(process)
    held: collections.deque[Any] = collections.deque()

    def one(index: int) -> None:
        parts = dataset.read_parts(index)
        decode_image(parts["jpg"], mode)
        parts["txt"].decode("utf-8")

    def batches(chosen: list[int]) -> None:
        for at in range(0, len(chosen), BATCH_SIZE):
            scope = SlabScope(BATCH_SIZE) if memory is not None else contextlib.nullcontext()
            with scope:
                for index in chosen[at : at + BATCH_SIZE]:
                    one(index)
            if memory is not None:
                held.append(memory.collect())
                if len(held) > IN_FLIGHT:
                    for slot, _ in held.popleft().segments:
                        memory.flags[process, slot] = 0  # what the trainer's finalizer does

    batches(indices[:warmup])
    barrier.wait()
    start = time.monotonic()  # CLOCK_MONOTONIC: comparable across processes on Linux
    batches(indices[warmup:])
    results.put((len(indices) - warmup, start, time.monotonic()))


def measure_limit(lib: str, root: Path, workers: int, batches: int, warmup: int) -> dict[str, Any]:
    """``max(1, workers)`` processes that only read and decode (to float CHW as the
    loaders do for ``limit``, to uint8 CHW for ``limit_u8``, into batch memory for
    ``limit_mem``) the samples the loaders read: samples/s = all their samples over the span
    from the first start to the last end (a sum of rates would overcount a process that
    ran alone on a core after the other finished)."""
    import multiprocessing
    import random

    processes = max(1, workers)
    dataset = PlainTarDataset(root)
    order = list(range(len(dataset)))
    random.Random(0).shuffle(order)
    per_process = (batches + warmup) * BATCH_SIZE // processes
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(processes), context.Queue()
    memory = None
    if lib == "limit_mem":
        from energon_lite.batching.memory import BatchMemoryPool

        memory = BatchMemoryPool(processes, IN_FLIGHT + 1)
    children = [
        context.Process(
            target=_limit_process,
            args=(
                root,
                LIMIT_MODES[lib],
                memory,
                p,
                order[p * per_process : (p + 1) * per_process],
                warmup * BATCH_SIZE // processes,
                barrier,
                results,
            ),
        )
        for p in range(processes)
    ]
    for child in children:
        child.start()
    done = [results.get() for _ in children]
    for child in children:
        child.join()
    print(MARK, flush=True)
    span = max(end for _, _, end in done) - min(start for _, start, _ in done)
    return {"lib": lib, "workers": workers, "samples_per_s": sum(c for c, _, _ in done) / span}


class Peer:
    """Builds a loader of one library and reads its batches."""

    def __init__(self, lib: str, root: Path, workers: int) -> None:
        self.lib, self.root, self.workers = lib, root, workers

    def import_modules(self) -> None:
        """Import what this peer needs, so that imports stay out of the timings."""
        import numpy.random  # noqa: F401
        import PIL.Image  # noqa: F401
        import torch.utils.data  # noqa: F401

        if self.lib.startswith("energon_lite"):
            import energon_lite
            import energon_lite.sources.kinds  # noqa: F401

            # (a prepared tar folder is opened without the flavors' kind modules: not here;
            # the chain's stages and the decoder load where the chain runs, in the workers
            # at num_workers > 0, as the other peers' decoders do)
        elif self.lib == "energon":
            import megatron.energon  # noqa: F401
        else:
            import yaml  # noqa: F401

    def loader(self, state: Any = None) -> Any:
        if self.lib.startswith("energon_lite"):
            import energon_lite as el

            wc = el.WorkerConfig(rank=0, world_size=1, num_workers=self.workers)
            extra: dict[str, Any] = {}
            if self.lib.startswith("energon_lite_u8"):  # uint8 CHW, normalised by the consumer

                class Uint8TaskEncoder(el.DefaultTaskEncoder):
                    decoder = el.SampleDecoder(image_decode="torchrgb8")

                extra["task_encoder"] = Uint8TaskEncoder()
            ds = el.get_train_dataset(
                self.root,
                worker_config=wc,
                **extra,
                batch_size=BATCH_SIZE,
                shuffle_buffer_size=SHUFFLE_BUFFER,
                max_samples_per_sequence=MAX_SAMPLES_PER_SEQUENCE,
            )
            loader = el.get_savable_loader(ds)
        elif self.lib == "energon":
            import megatron.energon as me

            wc = me.WorkerConfig(rank=0, world_size=1, num_workers=self.workers)
            ds = me.get_train_dataset(
                self.root,
                split_part="train",
                worker_config=wc,
                batch_size=BATCH_SIZE,
                shuffle_buffer_size=SHUFFLE_BUFFER,
                max_samples_per_sequence=MAX_SAMPLES_PER_SEQUENCE,
            )
            loader = me.get_savable_loader(ds)
        else:
            from torch.utils.data import DataLoader

            return DataLoader(
                PlainTarDataset(self.root),
                batch_size=BATCH_SIZE,
                shuffle=True,
                num_workers=self.workers,
                prefetch_factor=2 if self.workers else None,
            )
        if state is not None:
            loader.restore_state_rank(state)
        return loader

    def size(self, batch: Any) -> int:
        image = batch["image"] if isinstance(batch, dict) else batch.image
        if self.lib == "energon_lite_u8n":
            import energon_lite

            image = energon_lite.normalize_batch(image, IMAGENET_MEAN, IMAGENET_STD)
        want_float = self.lib != "energon_lite_u8"
        if image.dtype.is_floating_point is not want_float or image.dim() != 4:
            raise RuntimeError(
                f"expected {'float' if want_float else 'uint8'} NCHW images, got {image.dtype} "
                f"{tuple(image.shape)}"
            )
        return int(image.shape[0])

    @staticmethod
    def keys(batch: Any) -> list[str]:
        return list(batch.__key__) if not isinstance(batch, dict) else []

    def state_bytes(self, loader: Any) -> tuple[Any, int | None, int | None]:
        """(state, serialised bytes as the library is checkpointed, pickle bytes)."""
        if self.lib == "torch":
            return None, None, None
        import torch

        state = loader.save_state_rank()
        if self.lib.startswith("energon_lite"):
            import msgpack

            return state, len(msgpack.packb(state)), len(pickle.dumps(state))
        buffer = io.BytesIO()
        torch.save(state, buffer)
        return state, len(buffer.getvalue()), len(pickle.dumps(state))


def measure(
    lib: str, root: Path, workers: int, batches: int, warmup: int, torch_threads: int
) -> dict[str, Any]:
    import torch

    warnings.filterwarnings("ignore")
    if lib in LIMIT_MODES:
        return measure_limit(lib, root, workers, batches, warmup)
    # DataLoader workers run torch with one thread; the main process does too here, because
    # on 2 busy cores intra-op threads spin: a 256x256 uint8 -> float conversion then takes
    # ~20 ms instead of ~1 ms, and the num_workers=0 figures would measure that, not loaders.
    torch.set_num_threads(torch_threads)
    peer = Peer(lib, root, workers)
    peer.import_modules()
    result: dict[str, Any] = {"lib": lib, "workers": workers}

    start = time.perf_counter()
    loader = peer.loader()
    iterator: Iterator[Any] = iter(loader)
    peer.size(next(iterator))
    result["first_batch_s"] = time.perf_counter() - start
    for _ in range(warmup):
        next(iterator)
    samples = 0
    start = time.perf_counter()
    for _ in range(batches):
        samples += peer.size(next(iterator))
    result["samples_per_s"] = samples / (time.perf_counter() - start)
    print(MARK, flush=True)

    state, state_bytes, pickle_bytes = peer.state_bytes(loader)
    result["state_bytes"], result["state_pickle_bytes"] = state_bytes, pickle_bytes
    if state is not None:
        expected = peer.keys(next(iterator))
        del iterator, loader  # stops the workers before the restored loader starts its own
        state = pickle.loads(pickle.dumps(state))  # as if read back from a checkpoint
        start = time.perf_counter()
        restored = iter(peer.loader(state))
        first = next(restored)
        result["restore_first_batch_s"] = time.perf_counter() - start
        result["resume_exact"] = peer.keys(first) == expected
        del restored
    return result


# the parent: rounds, table -----------------------------------------------------------------


def run_rounds(
    root: Path,
    rounds: int,
    batches: int,
    warmup: int,
    torch_threads: int,
    peers: dict[int, tuple[str, ...]] | None = None,
    script: str | None = None,
) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """``rounds`` A/B rounds of ``peers`` (loaders per worker count; this script's rows by
    default), each run a fresh child of ``script`` (this one by default)."""
    peers = PEERS if peers is None else peers
    results: dict[tuple[str, int], list[dict[str, Any]]] = {
        (lib, w): [] for w in peers for lib in peers[w]
    }
    script = str(Path(script or __file__).resolve())
    # every loader's modules from cached bytecode, as on a user's machine (cache_bytecode)
    base_env = cache_bytecode(
        ("energon_lite", "megatron.energon", "webdataset", "streaming", "litdata")
    )
    for r in range(rounds):
        for workers in peers:
            for lib in ab_order(peers[workers], r):
                cmd = [sys.executable, script, "--child", lib, "--workers", str(workers)]
                cmd += ["--data", str(root), "--batches", str(batches), "--warmup", str(warmup)]
                cmd += ["--torch-threads", str(torch_threads)]
                env = {**base_env, "ENERGON_LITE_JPEG_DECODER": "auto"}
                if lib in PILLOW:
                    env["ENERGON_LITE_JPEG_DECODER"] = "pillow"
                run = run_child(cmd, mark=MARK, env=env)
                lines = [line for line in run.lines if line.startswith(RESULT)]
                if run.returncode != 0 or not lines:
                    raise RuntimeError(f"{lib} workers={workers} failed:\n{run.stderr[-4000:]}")
                result = json.loads(lines[-1][len(RESULT) :])
                result["peak_rss"] = run.peak_rss_at_mark or run.peak_rss
                results[(lib, workers)].append(result)
                print(
                    f"round {r + 1}/{rounds} load {os.getloadavg()[0]:.1f} workers={workers} {lib:16s} "
                    f"{result['samples_per_s']:7.0f} samples/s, first batch "
                    f"{fmt_num(result.get('first_batch_s'), 2)} s, restore "
                    f"{fmt_num(result.get('restore_first_batch_s'), 2)} s",
                    file=sys.stderr,
                    flush=True,
                )
    return results


def summarise(results: dict[tuple[str, int], list[dict[str, Any]]]) -> str:
    def med(lib: str, w: int, key: str) -> float | None:
        return median([r.get(key) for r in results[(lib, w)]])

    def round_ratio(w: int, key: str, peer: str, lib: str = "energon_lite") -> float | None:
        pairs = zip(results[(lib, w)], results[(peer, w)])
        return median([ratio(a.get(key), b.get(key)) for a, b in pairs])

    def spread(w: int, peer: str, lib: str = "energon_lite") -> str:
        pairs = zip(results[(lib, w)], results[(peer, w)])
        values = [ratio(a.get("samples_per_s"), b.get("samples_per_s")) for a, b in pairs]
        present = [v for v in values if v is not None]
        return f"{min(present):.2f}-{max(present):.2f}" if present else "n/a"

    rows = []
    for w in WORKERS:
        for lib in PEERS[w]:
            exact = [r.get("resume_exact") for r in results[(lib, w)]]
            rows.append(
                [
                    lib,
                    w,
                    fmt_num(med(lib, w, "samples_per_s")),
                    fmt_num(med(lib, w, "first_batch_s"), 2, " s"),
                    fmt_bytes(med(lib, w, "peak_rss")),
                    fmt_bytes(med(lib, w, "state_bytes")),
                    fmt_num(med(lib, w, "restore_first_batch_s"), 2, " s"),
                    "n/a" if exact[0] is None else ("yes" if all(exact) else "NO"),
                ]
            )
    table = markdown_table(
        [
            "loader",
            "workers",
            "samples/s",
            "first batch",
            "peak RSS (tree)",
            "state",
            "restore -> 1st batch",
            "resume exact",
        ],
        rows,
    )

    ratio_rows = []
    for w in WORKERS:
        for key, label in (
            ("samples_per_s", "samples/s"),
            ("first_batch_s", "time to first batch"),
            ("peak_rss", "peak RSS"),
        ):
            ratio_rows.append(
                [
                    w,
                    label,
                    fmt_num(round_ratio(w, key, "energon"), 2, "x"),
                    fmt_num(round_ratio(w, key, "torch"), 2, "x"),
                ]
            )
    ratios = markdown_table(
        ["workers", "energon_lite / peer", "vs Energon", "vs plain torch"], ratio_rows
    )
    speed_rows = [
        [
            w,
            lib,
            peer,
            fmt_num(round_ratio(w, "samples_per_s", peer, lib), 2, "x"),
            spread(w, peer, lib),
        ]
        for w in WORKERS
        for lib, peer in (
            ("energon_lite", "energon"),
            ("energon_lite", "torch"),
            ("energon_lite", "limit"),
            ("energon_lite_u8", "energon_lite"),
            ("energon_lite_u8n", "energon_lite"),
            ("energon_lite_u8", "limit"),
            ("energon_lite_u8", "limit_u8"),
            ("limit_u8", "energon_lite"),
            ("energon_lite", "limit_mem"),
            ("limit_mem", "limit"),
            ("energon_lite", "energon_lite_pil"),
            ("limit", "limit_pil"),
            ("energon_lite", "limit_pil"),
        )
        if lib in PEERS[w] and peer in PEERS[w]
    ]
    speeds = markdown_table(
        ["workers", "loader", "peer", "samples/s ratio (median)", "spread (min-max)"], speed_rows
    )

    def check(ok: bool | None) -> str:
        return "n/a" if ok is None else ("met" if ok else "**not met**")

    def cmp(value: float | None, op: str, bound: float | None) -> bool | None:
        if value is None or bound is None:
            return None
        return value >= bound if op == ">=" else value <= bound if op == "<=" else value < bound

    w = 2
    vs_energon = round_ratio(w, "samples_per_s", "energon")
    vs_torch = round_ratio(w, "samples_per_s", "torch")
    vs_limit = round_ratio(w, "samples_per_s", "limit")
    vs_torch0 = round_ratio(0, "samples_per_s", "torch")
    u8 = round_ratio(w, "samples_per_s", "energon_lite", "energon_lite_u8")
    u8_of_limit = round_ratio(w, "samples_per_s", "limit_u8", "energon_lite_u8")
    restore = med("energon_lite", w, "restore_first_batch_s")
    state = med("energon_lite", w, "state_bytes")
    first = {n: med("energon_lite", n, "first_batch_s") for n in WORKERS}
    first_torch = {n: med("torch", n, "first_batch_s") for n in WORKERS}
    first_ratio = {n: round_ratio(n, "first_batch_s", "torch") for n in WORKERS}
    targets = markdown_table(
        ["target (2 workers unless said)", "measured (spread)", "status"],
        [
            [
                "samples/s >= 2.0x Energon",
                f"{fmt_num(vs_energon, 2, 'x')} ({spread(w, 'energon')})",
                check(cmp(vs_energon, ">=", 2.0)),
            ],
            [
                "samples/s >= 2.0x plain torch",
                f"{fmt_num(vs_torch, 2, 'x')} ({spread(w, 'torch')})",
                check(cmp(vs_torch, ">=", 2.0)),
            ],
            [
                ">= 90% of the two-process decode limit",
                f"{fmt_num(None if vs_limit is None else 100 * vs_limit, 0, '%')}"
                f" ({spread(w, 'limit')})",
                check(cmp(vs_limit, ">=", 0.9)),
            ],
            [
                "samples/s >= 1.3x plain torch (0 workers)",
                f"{fmt_num(vs_torch0, 2, 'x')} ({spread(0, 'torch')})",
                check(cmp(vs_torch0, ">=", 1.3)),
            ],
            [
                "uint8 batches >= 1.0x the float path, >= 80% of limit_u8",
                f"{fmt_num(u8, 2, 'x')} ({spread(w, 'energon_lite', 'energon_lite_u8')}); "
                f"of limit_u8: {fmt_num(None if u8_of_limit is None else 100 * u8_of_limit, 0, '%')}",
                check(
                    None if u8 is None or u8_of_limit is None else u8 >= 1.0 and u8_of_limit >= 0.8
                ),
            ],
            [
                "restore to first batch < 1 s",
                fmt_num(restore, 2, " s"),
                check(cmp(restore, "<", 1.0)),
            ],
            ["state <= 15 KB", fmt_bytes(state), check(cmp(state, "<=", 15_000))],
            *[
                [
                    f"time to first batch <= plain torch's ({n} workers)",
                    f"{fmt_num(first[n], 2, ' s')} vs {fmt_num(first_torch[n], 2, ' s')}"
                    f" ({fmt_num(first_ratio[n], 2, 'x')})",
                    check(cmp(first_ratio[n], "<=", 1.0)),
                ]
                for n in WORKERS
            ],
        ],
    )
    return (
        f"{table}\n\nRatios (median of per-round ratios):\n\n{ratios}\n\n"
        f"samples/s, same-round ratios:\n\n{speeds}\n\nTargets:\n\n{targets}"
    )


def add_round_arguments(parser: argparse.ArgumentParser, children: Sequence[str]) -> None:
    """The options of a benchmark run in A/B rounds of child processes (this script's and
    ``bench_peers.py``'s), and the hidden ones each child is started with."""
    parser.add_argument("--samples", type=int, default=20_000, help="dataset size")
    parser.add_argument("--rounds", type=int, default=3, help="A/B rounds (medians reported)")
    parser.add_argument("--batches", type=int, default=200, help="timed batches per run")
    parser.add_argument("--warmup", type=int, default=10, help="untimed batches before timing")
    parser.add_argument(
        "--torch-threads", type=int, default=1, help="torch intra-op threads in the main process"
    )
    parser.add_argument("--quick", action="store_true", help="4,000 samples, 1 round, 30 batches")
    parser.add_argument("--child", choices=children, help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)


def run_as_child(args: argparse.Namespace, measure: Callable[..., dict[str, Any]]) -> bool:
    """In a child (``--child``): measure, print the result line for the parent, and say so.
    In the parent: apply ``--quick`` and say it is not a child."""
    if args.child:
        result = measure(
            args.child, args.data, args.workers, args.batches, args.warmup, args.torch_threads
        )
        print(RESULT + json.dumps(result), flush=True)
        return True
    if args.quick:
        args.samples, args.rounds, args.batches, args.warmup = 4_000, 1, 30, 3
    return False


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_round_arguments(parser, CHILDREN)
    args = parser.parse_args(argv)
    if run_as_child(args, measure):
        return
    root = build_dataset(args.samples)
    started = time.perf_counter()
    load_before = os.getloadavg()
    results = run_rounds(root, args.rounds, args.batches, args.warmup, args.torch_threads)
    print(
        f"{args.samples:,} samples of 256x256 JPEG + caption, batch {BATCH_SIZE}, shuffle buffer "
        f"{SHUFFLE_BUFFER}, max_samples_per_sequence {MAX_SAMPLES_PER_SEQUENCE}; {args.rounds} "
        f"rounds x {args.batches} timed batches after {args.warmup} warm-up; "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"{time.perf_counter() - started:.0f} s in all; load average (1, 5, 15 min) "
        f"{load_before[0]:.1f} / {load_before[1]:.1f} / {load_before[2]:.1f} before, "
        f"{'/'.join(f'{x:.1f}' for x in os.getloadavg())} after\n"
    )
    print(summarise(results))


if __name__ == "__main__":
    main()
