"""The plot of a scheduled run in docs/metadataset.md: ``docs/images/mix_schedule.png``.

Two caption datasets (written to a temporary folder) blended by the ramp of the guide:
9:1 until step 200, a linear ramp to 1:9 at step 600, then 1:9; ``batch_composition:
random`` (each sample drawn by weight), batches of 32, 2 workers, a shuffle buffer of 64.
``loader.mix()`` is read every 10 batches and drawn as ``energon-lite bench`` draws its
``mix.png``: dashed, each dataset's target share at each step; solid, its share of the
samples delivered between two readings.

    python benchmarks/plot_mix_schedule.py [--out docs/images/mix_schedule.png]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

import energon_lite as el
from energon_lite.cli.bench import plot_mix
from energon_lite.synth.shards import write_captioning_shards

ROOT = Path(__file__).resolve().parents[1]
YAML = """__module__: energon_lite
__class__: MetadatasetV2
splits:
  train:
    blend:
      - path: ./web
        weight: {schedule: [[0, 9], [200, 9], [600, 1]], interpolate: linear}
      - path: ./curated
        weight: {schedule: [[0, 1], [200, 1], [600, 9]], interpolate: linear}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "mix_schedule.png")
    parser.add_argument("--steps", type=int, default=800)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in ("web", "curated"):
            write_captioning_shards(root / name, 400, 100, image_size=(8, 8))
            el.prepare_dataset(
                root / name,
                split_ratio=[("train", 1)],
                sample_type="CaptioningSample",
                field_map={"image": "jpg", "caption": "txt"},
                progress=False,
            )
        (root / "mix.yaml").write_text(YAML)
        dataset = el.get_train_dataset(
            root / "mix.yaml",
            worker_config=el.WorkerConfig(0, 1, 2),
            batch_size=32,
            shuffle_buffer_size=64,
            max_samples_per_sequence=20,
        )
        loader = el.get_savable_loader(dataset)
        readings = []
        for step, _ in enumerate(loader, start=1):
            if step % 10 == 0:
                readings.append(loader.mix())
            if step >= args.steps:
                break
        loader.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    plot_mix(readings, args.out, Figure, FigureCanvasAgg)
    print(f"wrote {args.out} ({len(readings)} readings)")


if __name__ == "__main__":
    main()
