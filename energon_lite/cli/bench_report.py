"""``energon-lite bench``'s plots, and ``--report out.html``: one page that needs nothing else.

Each plot is drawn by one function on a matplotlib ``Axes`` (throughput over time, each
stage's share, worker busy over time, the mix delivered against its schedule, shard cache
hits and misses), so that the separate PNGs of ``--out``, the page and its PNG are the same
drawings. The page holds the printed report and every plot as an inline base64 PNG: no
script, style sheet or image is fetched, so it opens offline, from a CI artifact or mail.
The matching PNG (``out.png`` beside ``out.html``) has all plots in one picture, for
terminals and CI logs. Needs matplotlib (``pip install 'energon-lite[plot]'``).
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import os
from pathlib import Path
from typing import Any

from energon_lite.loader.stats_report import label

__all__ = ["PLOTS", "plot_mix", "windowed_shares", "write_report"]

COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="tab:gray")
    ax.set_xticks([])
    ax.set_yticks([])


def draw_throughput(ax: Any, report: dict[str, Any]) -> None:
    """Samples/s over the run, and its mean."""
    points = report["throughput"]
    if points:
        ax.plot([t for t, _ in points], [r for _, r in points], marker=".", color="tab:blue")
    ax.axhline(report["samples_per_s"], color="tab:gray", linestyle="--", label="mean")
    ax.set_xlabel("seconds since the loader was built")
    ax.set_ylabel("samples/s")
    ax.set_ylim(bottom=0)
    ax.set_title(f"throughput: {report['samples_per_s']:,.0f} samples/s")
    ax.legend(loc="lower right")


def draw_stages(ax: Any, report: dict[str, Any]) -> None:
    """Each stage's share of the workers' busy time, as bars."""
    stages = [*report["stages"], {"name": "other", "fraction": report["other"]["fraction"]}]
    names = [label(s) if s["name"] != "other" else "other (state, transport)" for s in stages]
    shares = [100 * s["fraction"] for s in stages]
    bars = ax.barh(names[::-1], shares[::-1], color="tab:orange")
    ax.bar_label(bars, labels=[f"{v:.1f}%" for v in shares[::-1]], padding=3)
    ax.set_xlabel("share of the workers' busy time (%)")
    ax.set_xlim(0, max([100.0, *shares]) * 1.1)
    ax.set_title(f"where the time goes (bottleneck: {report['bottleneck']})")


def draw_workers(ax: Any, report: dict[str, Any]) -> None:
    """Each worker's busy fraction in each window of ``loader.metrics()``."""
    windows = report.get("windows", [])
    workers = sorted(
        {name.split("/")[2] for _, m in windows for name in m if name.endswith("/busy_fraction")},
        key=int,
    )
    if not workers:
        _empty(ax, "no worker processes (num_workers=0)")
        ax.set_title("worker busy")
        return
    for i, worker in enumerate(workers):
        key = f"loader/worker/{worker}/busy_fraction"
        points = [(t, 100 * m[key]) for t, m in windows if key in m]
        ax.plot(*zip(*points), marker=".", color=COLORS[i % len(COLORS)], label=f"worker {worker}")
    ax.set_xlabel("seconds since the loader was built")
    ax.set_ylabel("busy (%)")
    ax.set_ylim(0, 105)
    ax.set_title("worker busy")
    ax.legend(loc="lower right", fontsize="small")


def draw_cache(ax: Any, report: dict[str, Any]) -> None:
    """Shard cache hits and misses, added up over the run."""
    windows = report.get("windows", [])
    times = [t for t, _ in windows]
    hits = list(itertools.accumulate(m.get("loader/cache/hits", 0.0) for _, m in windows))
    misses = list(itertools.accumulate(m.get("loader/cache/misses", 0.0) for _, m in windows))
    ax.set_title("node shard cache")
    if not windows or not (hits[-1] or misses[-1]):
        _empty(ax, "no remote shards read through the cache")
        return
    ax.plot(times, hits, color="tab:green", marker=".", label="hits (served from disk)")
    ax.plot(times, misses, color="tab:red", marker=".", label="misses (fetched)")
    ax.set_xlabel("seconds since the loader was built")
    ax.set_ylabel("shard opens, so far")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize="small")


def windowed_shares(mixes: list[dict[str, Any]], unit: str) -> list[list[float]]:
    """Each source's share of what was delivered between two readings of the mix (``unit``:
    "samples" or "tokens"), one list per reading after the first."""
    out = []
    for before, after in itertools.pairwise(mixes):
        delta = [
            (a[unit] or 0.0) - (b[unit] or 0.0) for a, b in zip(after["sources"], before["sources"])
        ]
        total = sum(delta)
        out.append([d / total if total > 0 else 0.0 for d in delta])
    return out


def draw_mix(ax: Any, mixes: list[dict[str, Any]]) -> None:
    """Each blend source's share of the samples (or tokens, where costed) delivered between
    two readings, against its target share at that step."""
    if len(mixes) < 2:
        _empty(ax, "no blend (one dataset)" if not mixes else "too short to see the mix")
        ax.set_title("the mix delivered against the target")
        return
    steps = [m["step"] for m in mixes]
    unit = "tokens" if mixes[-1]["sources"][0]["tokens"] is not None else "samples"
    shares = windowed_shares(mixes, unit)
    # a window holds steps [before, after): its middle step is where its target was
    middles = [(a + b - 1) / 2 for a, b in itertools.pairwise(steps)]
    for i, source in enumerate(mixes[-1]["sources"]):
        color = COLORS[i % len(COLORS)]
        name = source["path"].split(" (split")[0].rsplit("/", 1)[-1]
        ax.plot(steps, [100 * m["sources"][i]["target"] for m in mixes], color=color,
                linestyle="--", label=f"{name}: target")  # fmt: skip
        ax.plot(middles, [100 * w[i] for w in shares], color=color, marker=".",
                label=f"{name}: delivered ({unit})")  # fmt: skip
    ax.set_xlabel("step (batches delivered)")
    ax.set_ylabel("share (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"the mix delivered ({unit}, per window) against the target")
    ax.legend(loc="best", fontsize="small")


def plot_mix(mixes: list[dict[str, Any]], path: Path, figure: Any, canvas: Any) -> None:
    """mix.png: :func:`draw_mix` alone (``figure``, ``canvas``: matplotlib's classes)."""
    fig = figure(figsize=(8, 4), dpi=100)
    canvas(fig)
    draw_mix(fig.add_subplot(), mixes)
    fig.tight_layout()
    fig.savefig(path)


# (title on the page, drawing function, what it reads of the report)
PLOTS = [
    ("Throughput over time", draw_throughput, None),
    ("Time per stage", draw_stages, None),
    ("Worker busy", draw_workers, None),
    ("Mix against the schedule", draw_mix, "mix_timeline"),
    ("Shard cache hits", draw_cache, None),
]


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _draw(ax: Any, plot: tuple[str, Any, str | None], report: dict[str, Any]) -> None:
    _, draw, key = plot
    draw(ax, report[key] if key else report)


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def write_report(
    report: dict[str, Any], lines: list[str], path: str | os.PathLike[str]
) -> tuple[Path, Path]:
    """``path`` (HTML, self-contained) and the PNG beside it, of ``run_bench``'s ``report``
    and the ``lines`` it printed."""
    page = Path(path)
    page.parent.mkdir(parents=True, exist_ok=True)
    sections = []
    for plot in PLOTS:
        fig = _figure(8, 0.5 * len(report["stages"]) + 2.5 if plot[1] is draw_stages else 4)
        _draw(fig.add_subplot(), plot, report)
        data = base64.b64encode(_png(fig)).decode()
        title = html.escape(plot[0])
        sections.append(
            f'<h2>{title}</h2>\n<img alt="{title}" width="800" src="data:image/png;base64,{data}">'
        )
    text = html.escape("\n".join(lines))
    body = "\n".join(sections)
    page.write_text(
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        "<title>energon-lite bench report</title>\n<style>body{font-family:sans-serif;"
        "margin:2em;max-width:60em}pre{background:#f4f4f4;padding:1em;white-space:pre-wrap}"
        "</style></head><body>\n<h1>energon-lite bench report</h1>\n"
        f"<pre>{text}</pre>\n{body}\n</body></html>\n",
        encoding="utf-8",
    )
    fig = _figure(16, 13)
    for number, plot in enumerate(PLOTS):
        _draw(fig.add_subplot(3, 2, number + 1), plot, report)
    picture = page.with_suffix(".png")
    picture.write_bytes(_png(fig))
    return page, picture
