"""Reading ``loader.stats()``: a text table, the bottleneck stage and what to try about it.

Used by ``energon-lite bench`` and available to trainers that log the loader::

    from energon_lite.loader.stats_report import format_stats
    print("\\n".join(format_stats(loader.stats())))

What a stage does and what to try when it is the bottleneck are its class's
``STATS_LABEL`` and ``STATS_HINT`` (:mod:`energon_lite.stages.base`).
"""

from __future__ import annotations

import os
from typing import Any

from energon_lite.loader.probe import stage_of


def label(stage: dict[str, Any]) -> str:
    """``"decode (Encode)"``; a hook's own name (``encode_sample``) as is."""
    cls = None if stage.get("inside") else stage_of(stage["name"])
    what = cls.STATS_LABEL if cls is not None else None
    return f"{what} ({stage['name']})" if what else str(stage["name"])


def bottleneck(stats: dict[str, Any]) -> tuple[str, float]:
    """The stage (or ``"other"``) with the largest share of the workers' busy time."""
    shares = [(label(s), s["fraction"]) for s in stats["stages"]]
    shares.append(("other (state, transport)", stats["other"]["fraction"]))
    return max(shares, key=lambda item: item[1]) if shares else ("none", 0.0)


def hint(stats: dict[str, Any], num_workers: int, cpus: int | None = None) -> str:
    """One sentence: what to change first, from the bottleneck and the workers' busy time."""
    cpus = cpus or os.cpu_count() or 1
    top = max(stats["stages"], key=lambda s: s["fraction"], default=None)
    if top is None or stats["other"]["fraction"] > top["fraction"]:
        percent = round(100 * stats["other"]["fraction"])
        return (
            f"state saving and transport checks are {percent}% of worker time: batches with "
            "many Python objects cost most; keep batch contents to tensors and short lists"
        )
    percent = round(100 * top["fraction"])
    cls = None if top.get("inside") else stage_of(top["name"])
    more_workers = (
        f"add workers (num_workers={num_workers} on {cpus} CPUs)"
        if num_workers < cpus
        else f"a faster machine (all {cpus} CPUs have a worker already)"
    )
    if top.get("inside"):
        text = (
            f"your {top['name']} is {percent}%: move per-sample work to encode_batch or onto "
            f"the GPU, or {more_workers}"
        )
    elif cls is not None and cls.STATS_HINT:
        text = cls.STATS_HINT.format(percent=percent, more_workers=more_workers)
    else:
        text = f"{label(top)} is {percent}% of worker time"
    if num_workers == 0:
        text += "; with num_workers=0 loading runs in the training process: use num_workers >= 2"
    return text


def format_stats(stats: dict[str, Any]) -> list[str]:
    """``loader.stats()`` as lines of text: totals, workers, then one row per stage."""
    samples = max(1, stats["samples"])
    lines = [
        f"{stats['samples']:,} samples in {stats['batches']:,} batches over "
        f"{stats['elapsed_s']:.1f} s: {stats['samples_per_s']:,.0f} samples/s; the trainer "
        f"waited {100 * stats['wait_fraction']:.0f}% of that time for batches",
    ]
    if stats["workers"]:
        lines.append(
            "worker busy: "
            + ", ".join(f"#{w['worker']} {100 * w['busy_fraction']:.0f}%" for w in stats["workers"])
        )
    for restart in stats.get("worker_restarts", []):  # lost workers replaced (healing.py)
        after = restart["seconds"]
        lines.append(
            f"worker restart {restart['number']}: worker {restart['worker']} {restart['cause']}"
            + ("" if after is None else f", replacement pool settled in {after:.2f} s")
        )
    header = ("stage", "items in", "items out", "held/cap", "us/item", "us/sample", "share")
    rows = [header]
    for s in stats["stages"]:
        held = "" if s["mean_held"] is None else f"{s['mean_held']:.0f}"
        if held and s["capacity"] is not None:
            held += f"/{s['capacity']}"
        rows.append(
            (
                ("  " if s.get("inside") else "") + label(s),
                "" if s["items_in"] is None else f"{s['items_in']:,}",
                f"{s['items_out']:,}",
                held,
                f"{s['us_per_item']:,.0f}",
                f"{1e6 * s['time_s'] / samples:,.0f}",
                f"{100 * s['fraction']:.1f}%",
            )
        )
    other = stats["other"]
    rows.append(
        ("other (state, transport)", "", "", "", "", f"{1e6 * other['time_s'] / samples:,.0f}",
         f"{100 * other['fraction']:.1f}%")
    )  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
    if stats.get("mix"):
        from energon_lite.loader.mix_report import format_mix

        lines += format_mix(stats["mix"])
    return lines
