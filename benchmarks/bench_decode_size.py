"""Decode at the size the task needs: JPEG draft (DCT-domain downscaling) against full decode.

Data: ``--samples`` photo-like 1024x1024 JPEGs (``energon_lite.synth.photos``: smooth
shading, 1/f texture, hard edges; quality 90, ~210 KB) + captions, tar shards prepared once
under ``benchmarks/data/`` (git-ignored). The task needs 256x256 uint8 images
(``SampleDecoder(image_decode="torchrgb8", image_size=256)``). Variants:

* ``pillow``: the conventional path: the full 1024x1024 decode, Pillow's bicubic resize
  (what torchvision's ``Resize`` does to a PIL image, and what energon_lite did before its
  resize moved to torch), then the same CHW uint8 tensor (``SampleDecoder(image_decode=
  "pilrgb", image_size=256, image_draft=False)`` + ``pil_to_chw``);
* ``full``: ``image_draft=False``: the full 1024x1024 decode, then energon_lite's resize
  (Pillow's bicubic filter computed by torch: ``energon_lite/decode/resize.py``);
* ``draft``: the default, ``image_draft=True``: JPEG draft to >= 2x the target (a 512x512
  decode at the 1/2 DCT scale), then the same resize;
* ``draft1``: ``image_draft=1.0``: draft to the target itself (the 1/4 DCT scale here),
  then the resize (faster, further from the full path).

Two measurements, each in rounds whose order alternates (A/B, rotated and reversed):

* ``decoder``: ``SampleDecoder.decode_part`` on the JPEG bytes in one process, samples per
  CPU second (``time.process_time``, less sensitive to the shared machine's load) and
  samples per wall second;
* ``loader``: the training loader (batch 32, 2 workers, shuffle buffer 100), a fresh
  child process per run, samples/s over ``--batches`` batches after 3 warm-up batches.

Ratios are against ``pillow`` and against ``full``. Also printed: the RMS difference in
grey levels between each variant and ``pillow`` over the data (the tests bound the
default's against ``full`` at 1 grey level; ``full`` and ``pillow`` differ by <= 1 level
at any pixel).

    python benchmarks/bench_decode_size.py [--samples 256] [--rounds 5]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from common import ab_order, markdown_table, median, run_child

DATA = Path(__file__).resolve().parent / "data"
VARIANTS: dict[str, bool | float | None] = {
    "pillow": None,
    "full": False,
    "draft": True,
    "draft1": 1.0,
}
TARGET = 256
SOURCE = 1024
RESULT = "RESULT "


def build_dataset(num_samples: int) -> Path:
    root = DATA / f"photos_{SOURCE}_{num_samples}"
    if (root / ".nv-meta" / "split.yaml").exists():
        return root
    from energon_lite import prepare_dataset
    from energon_lite.synth.photos import photo_jpeg

    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "parts").mkdir(parents=True)
    print(f"building {num_samples} {SOURCE}x{SOURCE} photos under {root} ...", file=sys.stderr)
    per_shard = 64
    for shard, start in enumerate(range(0, num_samples, per_shard)):
        with tarfile.open(tmp / "parts" / f"photos-{shard}.tar", "w") as tar:
            for index in range(start, min(num_samples, start + per_shard)):
                for name, data in (
                    (f"{index:06d}.jpg", photo_jpeg(index, (SOURCE, SOURCE))),
                    (f"{index:06d}.txt", f"photo {index}".encode()),
                ):
                    info = tarfile.TarInfo(name)
                    info.size, info.mtime = len(data), 0
                    tar.addfile(info, io.BytesIO(data))
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


def _jpegs(root: Path) -> list[bytes]:
    out = []
    for path in sorted((root / "parts").glob("*.tar")):
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                if member.name.endswith(".jpg"):
                    out.append(tar.extractfile(member).read())  # type: ignore[union-attr]
    return out


def pil_to_chw(img: Any) -> Any:
    """A PIL RGB image as a contiguous (3, H, W) uint8 tensor."""
    import numpy as np
    import torch

    return torch.from_numpy(np.array(img)).permute(2, 0, 1).contiguous()


def make_decode(name: str) -> Any:
    """JPEG bytes -> (3, 256, 256) uint8 tensor, the way variant ``name`` decodes."""
    from energon_lite import SampleDecoder

    draft = VARIANTS[name]
    if draft is None:
        pillow = SampleDecoder(image_decode="pilrgb", image_size=TARGET, image_draft=False)
        return lambda data: pil_to_chw(pillow.decode_part("jpg", data))
    ours = SampleDecoder(image_decode="torchrgb8", image_size=TARGET, image_draft=draft)
    return lambda data: ours.decode_part("jpg", data)


def decoder_rounds(root: Path, rounds: int) -> dict[str, list[tuple[float, float]]]:
    """Per variant and round: (samples per CPU second, samples per wall second)."""
    import torch

    torch.set_num_threads(1)
    jpegs = _jpegs(root)
    decoders = {name: make_decode(name) for name in VARIANTS}
    out: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
    for r in range(rounds):
        for name in ab_order(list(VARIANTS), r):
            cpu, wall = time.process_time(), time.perf_counter()
            for data in jpegs:
                decoders[name](data)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            out[name].append((len(jpegs) / cpu, len(jpegs) / wall))
    return out


def rms_errors(root: Path, reference: str) -> dict[str, float]:
    """Per variant: the worst RMS difference (grey levels) from ``reference`` over 32 JPEGs."""
    jpegs = _jpegs(root)[:32]
    ref = make_decode(reference)
    refs = [ref(d).double() for d in jpegs]
    worst: dict[str, float] = {}
    for name in VARIANTS:
        decode = make_decode(name)
        worst[name] = max(
            float(((decode(d).double() - r) ** 2).mean().sqrt()) for d, r in zip(jpegs, refs)
        )
    return worst


def loader_child(root: Path, variant: str, workers: int, batches: int) -> dict[str, Any]:
    import torch

    import energon_lite as el

    torch.set_num_threads(1)

    class PillowTaskEncoder(el.DefaultTaskEncoder):
        def encode_sample(self, sample: Any) -> Any:
            sample.image = pil_to_chw(sample.image)
            return sample

    draft = VARIANTS[variant]
    if draft is None:
        encoder: el.DefaultTaskEncoder = PillowTaskEncoder()
        encoder.decoder = el.SampleDecoder(
            image_decode="pilrgb", image_size=TARGET, image_draft=False
        )
    else:
        encoder = el.DefaultTaskEncoder()
        encoder.decoder = el.SampleDecoder(
            image_decode="torchrgb8", image_size=TARGET, image_draft=draft
        )
    wc = el.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    ds = el.get_train_dataset(
        root,
        worker_config=wc,
        batch_size=32,
        shuffle_buffer_size=100,
        max_samples_per_sequence=100,
        task_encoder=encoder,
    )
    loader = el.get_savable_loader(ds)
    iterator = iter(loader)
    for _ in range(3):
        batch = next(iterator)
    assert tuple(batch.image.shape[1:]) == (3, TARGET, TARGET), batch.image.shape
    samples, start = 0, time.perf_counter()
    for _ in range(batches):
        samples += int(next(iterator).image.shape[0])
    return {"samples_per_s": samples / (time.perf_counter() - start)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=20, help="timed loader batches")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--child", choices=list(VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    root = build_dataset(args.samples)
    if args.child:
        result = loader_child(root, args.child, args.workers, args.batches)
        print(RESULT + json.dumps(result), flush=True)
        return
    load_before = os.getloadavg()
    started = time.perf_counter()
    errors = {base: rms_errors(root, base) for base in ("pillow", "full")}
    dec = decoder_rounds(root, args.rounds)
    loaded: dict[str, list[float]] = {name: [] for name in VARIANTS}
    script = str(Path(__file__).resolve())
    for r in range(args.rounds):
        for name in ab_order(list(VARIANTS), r):
            cmd = [sys.executable, script, "--child", name, "--samples", str(args.samples)]
            cmd += ["--workers", str(args.workers), "--batches", str(args.batches)]
            run = run_child(cmd)
            lines = [line for line in run.lines if line.startswith(RESULT)]
            if run.returncode != 0 or not lines:
                raise RuntimeError(f"{name} failed:\n{run.stderr[-3000:]}")
            loaded[name].append(json.loads(lines[-1][len(RESULT) :])["samples_per_s"])
            print(
                f"round {r + 1} load {os.getloadavg()[0]:.1f} {name}: {loaded[name][-1]:.0f}/s",
                file=sys.stderr,
            )

    def ratios(values: dict[str, list[float]], name: str, base: str) -> str:
        per_round = [a / b for a, b in zip(values[name], values[base])]
        return f"{median(per_round) or 0.0:.2f}x ({min(per_round):.2f}-{max(per_round):.2f})"

    cpu = {n: [v[0] for v in dec[n]] for n in VARIANTS}
    wall = {n: [v[1] for v in dec[n]] for n in VARIANTS}
    rows = []
    for name in VARIANTS:
        row: list[Any] = [name, f"{errors['pillow'][name]:.2f}", f"{errors['full'][name]:.2f}"]
        row += [f"{median(cpu[name]):,.0f}", ratios(cpu, name, "pillow"), ratios(cpu, name, "full")]
        row += [f"{median(wall[name]):,.0f}", ratios(wall, name, "pillow")]
        row += [f"{median(loaded[name]):,.0f}", ratios(loaded, name, "pillow")]
        row += [ratios(loaded, name, "full")]
        rows.append(row)
    print(
        f"{args.samples} photo-like {SOURCE}x{SOURCE} JPEGs -> {TARGET}x{TARGET} uint8; "
        f"{args.rounds} rounds; loader: batch 32, {args.workers} workers, {args.batches} batches; "
        f"{os.cpu_count()} CPUs; {time.perf_counter() - started:.0f} s; load average "
        f"{'/'.join(f'{x:.1f}' for x in load_before)} before, "
        f"{'/'.join(f'{x:.1f}' for x in os.getloadavg())} after\n"
    )
    print(
        markdown_table(
            [
                "variant",
                "worst RMS vs pillow",
                "vs full",
                "decoder samples/CPU-s",
                "vs pillow (spread)",
                "vs full (spread)",
                "decoder samples/s (wall)",
                "vs pillow (spread)",
                "loader samples/s",
                "vs pillow (spread)",
                "vs full (spread)",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
