"""Pinned memory and ``non_blocking`` copies to a GPU: H2D bytes/s and loader samples/s.

Runs only where ``torch.cuda.is_available()``; elsewhere it prints why it skipped and exits
with status 0 (the CPU-only reference machine of this repository skips it).

Two measurements, pinned against pageable, A/B alternated over ``--rounds`` rounds:

* **H2D copy**: one float32 batch as the loader makes it (``--batch`` x 3 x 256 x 256,
  25 MB for 32) copied ``--copies`` times to the GPU: pageable with ``.to("cuda")``, pinned
  (``tensor.pin_memory()`` once) with ``.to("cuda", non_blocking=True)``, timed with CUDA
  events around the copies: bytes/s of the copy engine as the process sees it.
* **uint8**: the same two measurements for a uint8 batch (``SampleDecoder(image_decode=
  "torchrgb8")``: a quarter of the bytes), converted to float on the GPU, so the copy a
  uint8 loader saves shows beside the float one.
* **Loader**: ``get_savable_loader(dataset, pin_memory=False | True)`` over ``--samples``
  256x256 JPEG + caption samples (batch 32, 2 workers, shuffle buffer 100), each batch's
  image tensor copied to the GPU (``non_blocking`` when pinned) and normalised there (a
  small GPU step, then one synchronize per batch as a training step would); samples/s over
  ``--batches`` batches after 5 warm-up batches, and the H2D bytes/s of those copies
  (CUDA events). Pinning happens in the loader's pin-memory thread (torch's DataLoader),
  calling the batch's ``pin_memory()`` (energon_lite's samples and batches have one).

    python benchmarks/bench_pin_memory.py [--rounds 5] [--samples 4000] [--batches 100] \
        [--dtypes float32,uint8]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ab_order, markdown_table, median

DATA = Path(__file__).resolve().parent / "data" / "pin_memory"


def build(samples: int) -> Path:
    root = DATA / f"captions_{samples}"
    if (root / ".nv-meta" / ".info.json").exists():
        return root
    from energon_lite import prepare_dataset
    from energon_lite.synth.shards import write_captioning_shards

    write_captioning_shards(root, samples, 500, image_size=(256, 256))
    prepare_dataset(
        root,
        split_ratio=[("train", 1)],
        sample_type="CaptioningSample",
        field_map={"image": "jpg", "caption": "txt"},
        progress=False,
    )
    return root


def h2d(pinned: bool, batch: int, copies: int, dtype: str = "float32") -> dict[str, float]:
    """Bytes/s and seconds per batch of ``copies`` host-to-device copies of one loader-sized
    batch (float32 in [0, 1], or uint8 as ``torchrgb8`` decodes it)."""
    import torch

    host = torch.rand(batch, 3, 256, 256)
    if dtype == "uint8":
        host = (host * 255).to(torch.uint8)
    if pinned:
        host = host.pin_memory()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    host.to("cuda", non_blocking=pinned)  # warm-up (allocator, context)
    torch.cuda.synchronize()
    start.record()
    for _ in range(copies):
        host.to("cuda", non_blocking=pinned)
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1000
    return {
        "h2d_bytes_per_s": copies * host.numel() * host.element_size() / seconds,
        "ms_per_batch": 1000 * seconds / copies,
    }


def loader(root: Path, pinned: bool, batches: int, dtype: str = "float32") -> dict[str, float]:
    import torch

    import energon_lite as el
    from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset

    extra: dict[str, object] = {}
    if dtype == "uint8":  # uint8 CHW batches, made float on the GPU

        class Uint8TaskEncoder(el.DefaultTaskEncoder):
            decoder = el.SampleDecoder(image_decode="torchrgb8")

        extra["task_encoder"] = Uint8TaskEncoder()
    dataset = get_train_dataset(
        root,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=2),
        **extra,  # type: ignore[arg-type]
        batch_size=32,
        shuffle_buffer_size=100,
        max_samples_per_sequence=100,
    )
    mean = torch.tensor([0.48, 0.46, 0.41], device="cuda").view(1, 3, 1, 1)
    copy_seconds = copied = samples = 0.0
    iterator = iter(get_savable_loader(dataset, pin_memory=pinned))
    for _ in range(5):
        next(iterator)
    probe = next(iterator)
    assert probe.image.is_pinned() == pinned, f"pin_memory={pinned}: is_pinned() disagrees"
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(batches):
        batch = next(iterator)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        image = batch.image.to("cuda", non_blocking=pinned)
        end.record()
        if image.dtype == torch.uint8:
            image = image.float() / 255
        ((image - mean) / 0.27).sum()  # a small step on the GPU
        torch.cuda.synchronize()
        copy_seconds += begin.elapsed_time(end) / 1000
        copied += batch.image.numel() * batch.image.element_size()
        samples += len(batch.__key__)
    seconds = time.perf_counter() - start
    return {"samples_per_s": samples / seconds, "h2d_bytes_per_s": copied / copy_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--copies", type=int, default=50)
    parser.add_argument("--dtypes", default="float32,uint8", help="batch dtypes to measure")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print(
            "bench_pin_memory: skipped: no CUDA GPU here (torch.cuda.is_available() is False); "
            "pinning only matters for copies to a GPU. Run it on a machine with one."
        )
        return
    root = build(args.samples)
    results: dict[tuple[str, bool], list[dict[str, float]]] = {}
    cases = [False, True]
    dtypes = args.dtypes.split(",")
    for round_index in range(args.rounds):
        for dtype in dtypes:
            for pinned in ab_order(cases, round_index):
                copy = h2d(pinned, args.batch, args.copies, dtype)
                results.setdefault((f"copy {dtype}", pinned), []).append(copy)
                run = loader(root, pinned, args.batches, dtype)
                results.setdefault((f"loader {dtype}", pinned), []).append(run)
        print(f"round {round_index + 1}: {json.dumps({str(k): v[-1] for k, v in results.items()})}")
    gpu = torch.cuda.get_device_name()
    print(
        f"\n{gpu}, torch {torch.__version__}, {os.cpu_count()} CPUs, {args.rounds} rounds, "
        f"{time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.1f}\n"
    )
    rows = []
    for what in [f"{kind} {dtype}" for kind in ("copy", "loader") for dtype in dtypes]:
        for key in ("h2d_bytes_per_s", "ms_per_batch", "samples_per_s"):
            if key not in results[(what, False)][0]:
                continue
            a = [r[key] for r in results[(what, False)]]
            b = [r[key] for r in results[(what, True)]]
            ratios = [y / x for x, y in zip(a, b)]
            scale, unit = {
                "h2d_bytes_per_s": (1e9, "GB/s"),
                "ms_per_batch": (1, "ms per batch copy"),
                "samples_per_s": (1, "samples/s"),
            }[key]
            rows.append(
                [
                    what,
                    unit,
                    f"{median(a) / scale:,.2f} ({min(a) / scale:,.2f}-{max(a) / scale:,.2f})",
                    f"{median(b) / scale:,.2f} ({min(b) / scale:,.2f}-{max(b) / scale:,.2f})",
                    f"{median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})",
                ]
            )
    print(markdown_table(["measure", "unit", "pageable", "pinned + non_blocking", "ratio"], rows))


if __name__ == "__main__":
    main()
