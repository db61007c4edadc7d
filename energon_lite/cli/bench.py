"""``energon-lite bench PATH``: run the real training pipeline for a while and show where the time goes.

Builds ``get_train_dataset`` + ``get_savable_loader(stats=True)`` with the given task
encoder and workers, takes batches as fast as they come for ``--seconds``, then prints
``loader.stats()`` (per-stage time, samples/s, worker busy time) and the execution summary
(each stage's CPU, the bottleneck and a hint: ``loader/summary.py``), and writes
``stats.json``, ``throughput.png`` (samples/s over time) and
``stages.png`` (each stage's share of worker time) to ``--out``; for a blend also the mix
delivered per source against the target shares (printed, and ``mix.png`` over the run). The plots need matplotlib
(``pip install 'energon-lite[plot]'``); without it the command prints the same and says so.

``--task-encoder module:Class`` imports your module (trusted code, as your training script
is; see docs/safety.md) from the current directory or the environment.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from energon_lite.cli.bench_report import (
    draw_stages,
    draw_throughput,
    plot_mix,
    windowed_shares,
    write_report,
)
from energon_lite.errors import ConfigError
from energon_lite.loader.api import get_savable_loader, get_train_dataset
from energon_lite.loader.stats_report import bottleneck, format_stats, hint
from energon_lite.loader.summary import execution_summary
from energon_lite.task_encoder.base import TaskEncoder
from energon_lite.worker import WorkerConfig

__all__ = ["load_task_encoder", "plot_mix", "run_bench", "throughput", "windowed_shares"]

PLOT_EXTRA = "pip install 'energon-lite[plot]'  (matplotlib)"
MIX_EVERY = 5  # batches between two readings of the delivered mix (loader.mix())
WINDOW_S = 0.5  # seconds between two readings of loader.metrics() (the report's plots)


def load_task_encoder(spec: str) -> TaskEncoder:
    """``module:Class`` -> ``Class()``: the user's own code, named on the command line."""
    module_name, sep, class_name = spec.partition(":")
    if not sep or not module_name or not class_name:
        raise ConfigError(f"--task-encoder {spec!r}: expected module:Class, e.g. my_task:MyEncoder")
    if "" not in sys.path and os.getcwd() not in sys.path:  # as `python -m` finds modules
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"--task-encoder {spec!r}: cannot import {module_name!r}: {exc}") from exc
    cls = getattr(module, class_name, None)
    if cls is None:
        names = sorted(
            name
            for name, value in vars(module).items()
            if isinstance(value, type)
            and issubclass(value, TaskEncoder)
            and value is not TaskEncoder
        )
        raise ConfigError(
            f"--task-encoder {spec!r}: {module_name} has no {class_name!r}"
            + (f"; its TaskEncoder classes: {', '.join(names)}" if names else "")
        )
    if not (isinstance(cls, type) and issubclass(cls, TaskEncoder)):
        raise ConfigError(
            f"--task-encoder {spec!r}: {module_name}.{class_name} is not a TaskEncoder subclass"
        )
    try:
        return cls()
    except TypeError as exc:
        raise ConfigError(
            f"--task-encoder {spec!r}: {class_name}() needs arguments ({exc}); give it defaults "
            "or a subclass that sets them"
        ) from exc


def _batch_size(batch: Any) -> int:
    keys = getattr(batch, "__key__", None)
    if isinstance(keys, (list, tuple)):
        return len(keys)
    if isinstance(batch, dict) and isinstance(batch.get("__key__"), (list, tuple)):
        return len(batch["__key__"])
    return 1


def throughput(timeline: list[tuple[float, int]], bins: int = 40) -> list[tuple[float, float]]:
    """``(time, samples so far)`` per batch -> ``(window middle, samples/s)`` in equal windows
    from the first batch to the last."""
    bins = min(bins, len(timeline) // 2)
    if bins < 1:
        return []
    start, end = timeline[0][0], timeline[-1][0]
    width = max((end - start) / bins, 1e-9)
    counts = [0] * bins
    previous = timeline[0][1]
    for t, samples in timeline[1:]:
        counts[min(int((t - start) / width), bins - 1)] += samples - previous
        previous = samples
    return [(start + (k + 0.5) * width, count / width) for k, count in enumerate(counts)]


class _LiveRate:
    """A bar over the measured seconds, showing samples/s over the last second (stderr)."""

    def __init__(self, seconds: float, enabled: bool) -> None:
        self.bar = tqdm(
            total=round(seconds, 1), desc="bench (starting workers)", unit="s",
            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:.1f} s{postfix}",
            disable=not enabled,
        )  # fmt: skip
        self.shown = -1.0

    def show(self, elapsed: float, timeline: list[tuple[float, int]], last: bool = False) -> None:
        """Every half second; ``last``: the final count, whatever the time (the summary's)."""
        if self.bar.disable or not timeline or (elapsed - self.shown < 0.5 and not last):
            return
        self.shown = elapsed
        now, samples = timeline[-1]
        recent = next((i for i, (t, _) in enumerate(timeline) if t >= now - 1.0), 0)
        span = now - timeline[recent][0] if recent < len(timeline) - 1 else 0.0
        rate = (samples - timeline[recent][1]) / span if span > 0 else 0.0
        self.bar.set_description_str("bench", refresh=False)
        self.bar.set_postfix_str(f"{rate:,.0f} samples/s, {samples:,} samples", refresh=False)
        self.bar.update(min(elapsed, self.bar.total) - self.bar.n)

    def close(self) -> None:
        if not self.bar.disable and self.bar.n < self.bar.total:
            self.bar.update(self.bar.total - self.bar.n)  # a finished run ends at 100%
        self.bar.close()


def run_bench(
    path: str | os.PathLike[str],
    *,
    task_encoder: TaskEncoder | None = None,
    num_workers: int = 2,
    seconds: float = 10.0,
    batch_size: int = 32,
    shuffle_buffer_size: int | None = 100,
    max_samples_per_sequence: int | None = 100,
    split_part: str = "train",
    out: str | os.PathLike[str] | None = None,
    print_fn: Callable[[str], None] = print,
    progress: bool = False,
    report_path: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Run the pipeline ``seconds`` long; print the report; write the plots. Returns the stats
    plus ``first_batch_s``, ``throughput`` points and ``bottleneck``/``hint``.
    ``progress``: a bar on stderr over the seconds, with the samples/s of the last second.
    ``report_path``: also an HTML page with every plot, and its PNG (``bench_report.py``)."""
    if seconds <= 0:
        raise ConfigError(f"--seconds {seconds}: must be > 0")
    if batch_size < 1:
        raise ConfigError(f"--batch-size {batch_size}: must be >= 1")
    if num_workers < 0:
        raise ConfigError(f"--num-workers {num_workers}: must be >= 0 (0: no worker processes)")
    if report_path is not None:
        try:
            import matplotlib  # noqa: F401 (the report's plots)
        except ImportError:
            raise ConfigError(f"--report needs matplotlib: {PLOT_EXTRA}") from None
    begin = time.perf_counter()
    dataset = get_train_dataset(
        path,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=num_workers),
        batch_size=batch_size,
        shuffle_buffer_size=shuffle_buffer_size,
        max_samples_per_sequence=max_samples_per_sequence,
        split_part=split_part,
        task_encoder=task_encoder,
    )
    loader = get_savable_loader(dataset, stats=True)
    timeline: list[tuple[float, int]] = []
    samples, first = 0, None
    mixes: list[dict[str, Any]] = []  # the delivered mix every MIX_EVERY batches
    windows: list[tuple[float, dict[str, float]]] = []  # loader.metrics() every WINDOW_S
    live = _LiveRate(seconds, progress)
    try:
        for batch in loader:
            now = time.perf_counter() - begin
            first = now if first is None else first
            samples += _batch_size(batch)
            timeline.append((now, samples))
            live.show(now - first, timeline)
            if now - (windows[-1][0] if windows else first) >= WINDOW_S:
                windows.append((now, loader.metrics()))
            if len(timeline) % MIX_EVERY == 0:
                mix = loader.mix()
                if mix is not None:
                    mixes.append(mix)
            if now - first >= seconds:
                break
        if first is not None:
            live.show(timeline[-1][0] - first, timeline, last=True)
        stats = loader.stats()
    finally:
        live.close()
        loader.close()
    name, share = bottleneck(stats)
    report = {
        **stats,
        "first_batch_s": first,
        "throughput": throughput(timeline),
        "bottleneck": name,
        "bottleneck_fraction": share,
        "hint": hint(stats, num_workers),
        "mix_timeline": mixes,
        "windows": windows,
    }
    printed: list[str] = []

    def say(line: str) -> None:
        printed.append(line)
        print_fn(line)

    say(
        f"energon-lite bench {path}: {num_workers} workers, batch {batch_size}, "
        + (type(task_encoder).__name__ if task_encoder else "default TaskEncoder")
    )
    say(f"first batch after {first or 0:.2f} s")
    for line in format_stats(stats):
        say(line)
    for line in execution_summary(stats, num_workers):  # ends with the bottleneck and a hint
        say(line)
    if out is not None:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "stats.json").write_text(json.dumps(report, indent=1) + "\n")
        written = _plots(report, folder)
        if written:
            say("wrote " + ", ".join(str(p) for p in [folder / "stats.json", *written]))
        else:
            say(f"wrote {folder / 'stats.json'}; for the plots: {PLOT_EXTRA}")
    if report_path is not None:
        page, picture = write_report(report, printed, report_path)
        say(f"wrote {page} and {picture}")
    return report


def _plots(report: dict[str, Any], folder: Path) -> list[Path]:
    """throughput.png and stages.png (and mix.png for a blend), or [] without matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return []
    paths = [folder / "throughput.png", folder / "stages.png"]
    if report["mix_timeline"]:
        paths.append(folder / "mix.png")
        plot_mix(report["mix_timeline"], paths[2], Figure, FigureCanvasAgg)
    sizes = [(8, 4), (8, 0.5 * (len(report["stages"]) + 1) + 1.5)]
    for path, size, draw in zip(paths, sizes, (draw_throughput, draw_stages)):
        fig = Figure(figsize=size, dpi=100)
        FigureCanvasAgg(fig)
        draw(fig.add_subplot(), report)
        fig.tight_layout()
        fig.savefig(path)
    return paths
