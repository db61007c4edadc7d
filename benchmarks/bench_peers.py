"""energon_lite against every loader a team would pick instead, in the same run.

The five peers, each through its own public API, on the same samples (W1: 256x256 JPEG +
caption, batch 32, shuffled), each in a fresh child process, rounds in A/B order:

* ``energon_lite``, ``energon`` (megatron-energon), ``torch`` (a plain map-style
  ``DataLoader``): as in ``bench_pipeline.py``, whose measurement this script reuses;
* ``webdataset``: ``wds.WebDataset`` over the same tar shards (shard shuffle, a 100-sample
  shuffle buffer), decoded with Pillow to float CHW as the others, ``wds.WebLoader``;
* ``streaming`` (MosaicML Streaming): the same JPEG bytes and captions converted once to MDS
  (``MDSWriter``), ``StreamingDataset(local=..., shuffle=True)`` + ``StreamingDataLoader``;
* ``litdata``: the same converted once with ``litdata.optimize``, ``StreamingDataset`` +
  ``StreamingDataLoader``;
* ``limit``: not a loader but the ceiling of all of them: as many processes as workers (one
  for 0) that only read and decode the same samples with the same decoder. ``limit / it``
  is the most any loader can lead that loader by on this machine, in this run.
* ``limit_mem``: the same, but each image decoded into its row of a batch in reused
  shared-memory buffers, as a loader with workers must deliver its batches to the trainer;
  ``limit_mem / it`` leaves out only the cost of that delivery.

Peers without a decoder of their own (all but Energon) decode with energon_lite's own
``decode_image(jpg, "torchrgb")`` (``--peer-decode same``, the default: simplejpeg where the
``jpeg`` extra is installed, else Pillow), or with a plain Pillow call as a user would write
it (``--peer-decode pillow``: ``PIL.Image.open`` -> RGB -> float CHW in [0, 1]). Conversion times are printed. Time to the first batch is given twice: from building the
loader (modules imported) and from the child's interpreter start (start-up and imports
included, as a user's script pays it). Before
timing, each child checks its first batch: 32 float 3x256x256 images whose captions name
their sample (``sample <i>: ...``), and the first image equal to that sample's JPEG decoded
from the tar shards. A peer that saves state (Energon, energon_lite, Streaming, LitData)
is restored mid-epoch and timed to its first batch; "resume exact" compares that batch's
captions with the ones the uninterrupted loader gives next.

Installing the peers: MosaicML Streaming and LitData import torchvision, and PyPI's
torchvision cannot load beside the CPU build of torch 2.13 (``operator torchvision::nms
does not exist``). Run this benchmark in its own virtual environment with a torch and
torchvision that fit each other, for example::

    python -m venv /tmp/peers && . /tmp/peers/bin/activate
    pip install torch==2.14.1 torchvision==0.29.1      # the CPU machines' files; CUDA build
    pip install -e '.[bench]' webdataset
    pip install --no-deps mosaicml-streaming==0.13.0 litdata==0.2.76
    pip install 'transformers>=4.21,<5' 'xxhash>=3,<4' zstd brotli python-snappy catalogue \\
        lightning-utilities requests tifffile obstore

(``--no-deps`` keeps their cloud SDKs out: a local benchmark never loads them.) Then::

    python benchmarks/bench_peers.py [--samples 20000] [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import io
import os
import pickle
import platform
import shutil
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bench_pipeline as bp
from common import STARTED_AT, fmt_bytes, fmt_num, markdown_table, median, ratio

ALL = (
    "energon_lite",
    "energon",
    "torch",
    "webdataset",
    "streaming",
    "litdata",
    "limit",
    "limit_mem",
)
# "limit": as many processes as workers (one for 0) that only read and decode the same
# samples with the same decoder (bench_pipeline's ``limit``): no loader can pass it, so
# ``limit / peer`` is the most any loader can lead that peer by on this machine
LIMIT = "limit"
# "limit_mem": the limit, each image decoded into its row of a batch in reused shared-memory
# buffers, as the batches of any loader with workers must be delivered (bench_pipeline's
# ``limit_mem``): ``limit_mem / it`` leaves out only what the delivery itself costs
LIMIT_MEM = "limit_mem"
NEW = ("webdataset", "streaming", "litdata")
WORKERS = (0, 2)
RESULT, MARK = bp.RESULT, bp.MARK
PEER_DECODE = "BENCH_PEER_DECODE"  # set by --peer-decode for the children


# conversions, once per dataset size ----------------------------------------------------------


def _samples(root: Path) -> Iterator[tuple[bytes, str]]:
    dataset = bp.PlainTarDataset(root)
    for index in range(len(dataset)):
        parts = dataset.read_parts(index)
        yield parts["jpg"], parts["txt"].decode("utf-8")


def convert_streaming(root: Path) -> tuple[Path, float | None]:
    """The same JPEG bytes and captions as MDS shards (Streaming's format), once."""
    out = root.with_name(root.name + "_mds")
    if (out / "index.json").exists():
        return out, None
    from energon_lite.synth.tables import mds_writer_class

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    start = time.perf_counter()
    with mds_writer_class()(out=str(tmp), columns={"jpg": "bytes", "txt": "str"}) as writer:
        for jpg, txt in _samples(root):
            writer.write({"jpg": jpg, "txt": txt})
    seconds = time.perf_counter() - start
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out, seconds


def _litdata_item(item: tuple[bytes, str]) -> dict[str, Any]:
    return {"jpg": item[0], "txt": item[1]}


def convert_litdata(root: Path) -> tuple[Path, float | None]:
    """The same JPEG bytes and captions as LitData chunks (``litdata.optimize``), once."""
    out = root.with_name(root.name + "_litdata")
    if (out / "index.json").exists():
        return out, None
    import litdata

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    start = time.perf_counter()
    litdata.optimize(
        fn=_litdata_item,
        inputs=list(_samples(root)),
        output_dir=str(tmp),
        chunk_bytes="64MB",
        num_workers=1,
        verbose=False,
    )
    seconds = time.perf_counter() - start
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out, seconds


# the three peers this script adds ----------------------------------------------------------


def decode(jpg: bytes) -> Any:
    """The peers' decode (they have none of their own): float CHW in [0, 1], by
    ``PEER_DECODE``: "same" is energon_lite's own ``decode_image`` (simplejpeg where the
    jpeg extra is installed, else Pillow), "pillow" Pillow -> RGB -> float as a user would
    write it."""
    if os.environ.get(PEER_DECODE, "same") == "same":
        from energon_lite.decode.image import decode_image

        return decode_image(jpg, "torchrgb")
    import numpy as np
    import torch
    from PIL import Image

    with Image.open(io.BytesIO(jpg)) as img:
        array = np.asarray(img.convert("RGB"))
    return torch.from_numpy(array.transpose(2, 0, 1).copy()).float().div_(255.0)


class PlainTarDecoded(bp.PlainTarDataset):
    """The plain torch peer with the peers' decode."""

    def __getitem__(self, index: int) -> dict[str, Any]:
        parts = self.read_parts(index)
        return {"image": decode(parts["jpg"]), "caption": parts["txt"].decode("utf-8")}


def _decoded(sample: dict[str, Any]) -> dict[str, Any]:
    return {"image": decode(sample["jpg"]), "caption": sample["txt"]}


def _wds_sample(sample: dict[str, Any]) -> dict[str, Any]:
    return {"image": decode(sample["jpg"]), "caption": sample["txt"].decode("utf-8")}


class _Decoding:
    """A Streaming/LitData dataset subclass mixin: decode each sample as it is read."""

    def __getitem__(self, index: Any) -> dict[str, Any]:
        return _decoded(super().__getitem__(index))  # type: ignore[misc]


class NewPeer(bp.Peer):
    """webdataset, Streaming and LitData through their public APIs; the rest as in
    ``bench_pipeline.Peer``."""

    def import_modules(self) -> None:
        if self.lib not in NEW:
            return super().import_modules()
        import numpy.random  # noqa: F401
        import PIL.Image  # noqa: F401
        import torch.utils.data  # noqa: F401

        __import__({"webdataset": "webdataset", "streaming": "streaming"}.get(self.lib, "litdata"))

    def loader(self, state: Any = None) -> Any:
        if self.lib == "webdataset":
            import webdataset as wds
            import yaml

            split = yaml.safe_load((self.root / ".nv-meta" / "split.yaml").read_text())
            urls = [str(self.root / name) for name in split["split_parts"]["train"]]
            dataset = (
                wds.WebDataset(urls, shardshuffle=len(urls), empty_check=False)
                .shuffle(bp.SHUFFLE_BUFFER)
                .map(_wds_sample)
                .batched(bp.BATCH_SIZE, partial=False)
            )
            return wds.WebLoader(dataset, batch_size=None, num_workers=self.workers)
        if self.lib == "streaming":
            from streaming import StreamingDataLoader, StreamingDataset
            from streaming.base.util import clean_stale_shared_memory

            clean_stale_shared_memory()

            class Decoded(_Decoding, StreamingDataset):
                pass

            dataset = Decoded(
                local=str(self.root.with_name(self.root.name + "_mds")),
                shuffle=True,
                batch_size=bp.BATCH_SIZE,
            )
            loader = StreamingDataLoader(
                dataset, batch_size=bp.BATCH_SIZE, num_workers=self.workers, drop_last=True
            )
        elif self.lib == "litdata":
            import litdata

            class LitDecoded(_Decoding, litdata.StreamingDataset):
                pass

            dataset = LitDecoded(
                f"local:{self.root.with_name(self.root.name + '_litdata')}", shuffle=True
            )
            loader = litdata.StreamingDataLoader(
                dataset, batch_size=bp.BATCH_SIZE, num_workers=self.workers, drop_last=True
            )
        elif self.lib == "torch":
            from torch.utils.data import DataLoader

            return DataLoader(
                PlainTarDecoded(self.root),
                batch_size=bp.BATCH_SIZE,
                shuffle=True,
                num_workers=self.workers,
                prefetch_factor=2 if self.workers else None,
            )
        else:
            return super().loader(state)
        if state is not None:
            loader.load_state_dict(state)
        return loader

    @staticmethod
    def keys(batch: Any) -> list[str]:
        captions = batch["caption"] if isinstance(batch, dict) else batch.caption
        return [str(c) for c in captions]

    def state_bytes(self, loader: Any) -> tuple[Any, int | None, int | None]:
        if self.lib == "webdataset":
            return None, None, None
        if self.lib in ("streaming", "litdata"):
            import torch

            state = loader.state_dict()
            buffer = io.BytesIO()
            torch.save(state, buffer)
            return state, len(buffer.getvalue()), len(pickle.dumps(state))
        return super().state_bytes(loader)


def check_batch(peer: NewPeer, batch: Any, reference: bp.PlainTarDataset) -> None:
    """The first batch holds 32 float 3x256x256 images whose captions name their samples, and
    the first image is that sample's JPEG from the tar shards, decoded by ``decode_image``
    (Pillow and simplejpeg give the same pixels: bench_jpeg.py)."""
    import torch

    if peer.size(batch) != bp.BATCH_SIZE:
        raise RuntimeError(f"{peer.lib}: a batch of {peer.size(batch)}, not {bp.BATCH_SIZE}")
    image = batch["image"] if isinstance(batch, dict) else batch.image
    captions = NewPeer.keys(batch)
    if tuple(image.shape[1:]) != (3, 256, 256):
        raise RuntimeError(f"{peer.lib}: images of shape {tuple(image.shape)}")
    index = int(captions[0].split(":", 1)[0].removeprefix("sample "))
    # sample i is the (i % 1000)-th of shard data-(i // 1000).tar; the split lists its shards
    # in its own order (data-0, data-1, data-10, ...)
    shard, within = divmod(index, bp.SAMPLES_PER_SHARD)
    position = [Path(p).name for p in reference.paths].index(f"data-{shard}.tar")
    first = sum(1 for item in reference.items if item[0] < position)
    parts = reference.read_parts(first + within)
    if parts["txt"].decode("utf-8") != captions[0]:
        raise RuntimeError(f"{peer.lib}: caption {captions[0]!r} is not sample {index}'s")
    from energon_lite.decode.image import decode_image

    if not torch.equal(image[0], decode_image(parts["jpg"], "torchrgb")):
        raise RuntimeError(f"{peer.lib}: the first image is not sample {index}'s JPEG")


def measure(
    lib: str, root: Path, workers: int, batches: int, warmup: int, torch_threads: int = 1
) -> dict[str, Any]:
    """One loader's first batch, samples/s, state and restore (as ``bench_pipeline``), with
    its first batch checked against the tar shards."""
    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(torch_threads)
    if lib in (LIMIT, LIMIT_MEM):
        return bp.measure_limit(lib, root, workers, batches, warmup)
    peer = NewPeer(lib, root, workers)
    peer.import_modules()
    result: dict[str, Any] = {"lib": lib, "workers": workers}
    start = time.perf_counter()
    loader = peer.loader()
    iterator: Iterator[Any] = iter(loader)
    first = next(iterator)
    result["first_batch_s"] = time.perf_counter() - start
    if STARTED_AT in os.environ:  # from the interpreter's start: start-up and imports too
        result["start_to_first_batch_s"] = time.time() - float(os.environ[STARTED_AT])
    check_batch(peer, first, bp.PlainTarDataset(root))
    for _ in range(warmup):
        next(iterator)
    samples = 0
    start = time.perf_counter()
    for _ in range(batches):
        samples += peer.size(next(iterator))
    result["samples_per_s"] = samples / (time.perf_counter() - start)
    print(MARK, flush=True)
    state, result["state_bytes"], result["state_pickle_bytes"] = peer.state_bytes(loader)
    if state is not None:
        expected = peer.keys(next(iterator))
        del iterator, loader
        state = pickle.loads(pickle.dumps(state))
        start = time.perf_counter()
        restored = iter(peer.loader(state))
        got = next(restored)
        result["restore_first_batch_s"] = time.perf_counter() - start
        result["resume_exact"] = peer.keys(got) == expected
        del restored
    return result


# the parent --------------------------------------------------------------------------------


def summarise(results: dict[tuple[str, int], list[dict[str, Any]]], libs: tuple[str, ...]) -> str:
    def med(lib: str, w: int, key: str) -> float | None:
        return median([r.get(key) for r in results[(lib, w)]])

    def ratios(w: int, key: str, peer: str, lib: str = "energon_lite") -> list[float]:
        pairs = zip(results[(lib, w)], results[(peer, w)])
        return [v for a, b in pairs if (v := ratio(a.get(key), b.get(key))) is not None]

    def spread(values: list[float]) -> str:
        return f"{fmt_num(median(values), 2, 'x')} ({min(values):.2f}-{max(values):.2f})"

    rows = []
    for w in WORKERS:
        for lib in libs:
            exact = [r.get("resume_exact") for r in results[(lib, w)]]
            speed = ratios(w, "samples_per_s", lib)
            first = ratios(w, "first_batch_s", lib)
            cold = ratios(w, "start_to_first_batch_s", lib)
            ceiling = ratios(w, "samples_per_s", lib, LIMIT) if LIMIT in libs else []
            delivered = ratios(w, "samples_per_s", lib, LIMIT_MEM) if LIMIT_MEM in libs else []
            rows.append(
                [
                    w,
                    lib,
                    fmt_num(med(lib, w, "samples_per_s")),
                    spread(speed) if speed else "n/a",
                    spread(ceiling) if ceiling else "n/a",
                    spread(delivered) if delivered else "n/a",
                    fmt_num(med(lib, w, "first_batch_s"), 2, " s"),
                    fmt_num(median(first), 2, "x") if first else "n/a",
                    fmt_num(med(lib, w, "start_to_first_batch_s"), 2, " s"),
                    spread(cold) if cold else "n/a",
                    fmt_bytes(med(lib, w, "peak_rss")),
                    fmt_bytes(med(lib, w, "state_bytes")),
                    fmt_num(med(lib, w, "restore_first_batch_s"), 2, " s"),
                    "n/a" if exact[0] is None else ("yes" if all(exact) else "NO"),
                ]
            )
    return markdown_table(
        [
            "workers",
            "loader",
            "samples/s",
            "energon_lite / it (min-max)",
            "limit / it: the most any loader can lead it by",
            "limit_mem / it",
            "first batch",
            "first batch, ours / it",
            "from interpreter start",
            "from start, ours / it",
            "peak RSS (tree)",
            "state",
            "restore -> 1st batch",
            "resume exact",
        ],
        rows,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bp.add_round_arguments(parser, ALL)
    parser.add_argument("--libs", default=",".join(ALL), help="loaders to run, comma-separated")
    parser.add_argument(
        "--peer-decode",
        choices=("same", "pillow"),
        default="same",
        help="the peers' JPEG decode: energon_lite's decode_image (same) or plain Pillow",
    )
    args = parser.parse_args(argv)
    if bp.run_as_child(args, measure):
        return
    libs = tuple(lib for lib in args.libs.split(",") if lib)
    unknown = sorted(set(libs) - set(ALL))
    if unknown or "energon_lite" not in libs:
        parser.error(f"--libs: unknown {unknown} or energon_lite missing; choose from {ALL}")
    root = bp.build_dataset(args.samples)
    conversions = []
    for lib, convert in (("streaming", convert_streaming), ("litdata", convert_litdata)):
        if lib in libs:
            where, seconds = convert(root)
            took = "converted earlier" if seconds is None else f"converted in {seconds:.1f} s"
            conversions.append(f"{lib}: {where.name} ({took})")
    os.environ[PEER_DECODE] = args.peer_decode  # the children inherit it
    started, load_before = time.perf_counter(), os.getloadavg()
    results = bp.run_rounds(
        root,
        args.rounds,
        args.batches,
        args.warmup,
        args.torch_threads,
        peers={w: libs for w in WORKERS},
        script=__file__,
    )
    import torch

    print(
        f"{args.samples:,} samples of 256x256 JPEG + caption, batch {bp.BATCH_SIZE}; "
        f"{args.rounds} rounds x {args.batches} timed batches after {args.warmup} warm-up; "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, torch {torch.__version__}; "
        f"{time.perf_counter() - started:.0f} s in all; load average (1, 5, 15 min) "
        f"{'/'.join(f'{x:.1f}' for x in load_before)} before, "
        f"{'/'.join(f'{x:.1f}' for x in os.getloadavg())} after; peers decode with "
        f"{args.peer_decode!r}; " + ("; ".join(conversions) or "no conversions") + "\n"
    )
    print(summarise(results, libs))


if __name__ == "__main__":
    main()
