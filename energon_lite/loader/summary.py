"""The execution summary: where the workers' time went, stage by stage, and what limits the run.

``loader.execution_summary()`` (and the end of ``energon-lite bench``) prints, over the
batches received so far, each stage's time (its own time inside ``next()``, wall clock,
summed over the workers: on a machine shared with other processes it includes the time they
took the CPU) and share, then one line that names the bottleneck, and the advice ``docs/performance.md`` gives
for it (``stats_report.hint``, from the stage classes' ``STATS_HINT``):

* **data** when the trainer waited for batches at least ``DATA_BOUND`` of the time: the
  loader is the limit, and the stage with the largest share is where to look;
* **the training step** otherwise: the loader keeps up, and its stages matter only for the
  CPU they take from the trainer.
"""

from __future__ import annotations

from typing import Any

from energon_lite.loader.stats_report import bottleneck, hint, label

__all__ = ["DATA_BOUND", "execution_summary", "verdict"]

DATA_BOUND = 0.05  # the trainer waiting this share of the time or more: data is the limit


def verdict(stats: dict[str, Any]) -> str:
    """``"data"`` or ``"step"`` (see the module doc)."""
    return "data" if stats["wait_fraction"] >= DATA_BOUND else "step"


def execution_summary(stats: dict[str, Any], num_workers: int) -> list[str]:
    """A ``loader.stats()`` as lines: one per stage (seconds, share), then the bottleneck
    and the advice."""
    rows = [(label(s), s["time_s"], s["fraction"]) for s in stats["stages"]]
    rows.append(("other (state, transport)", stats["other"]["time_s"], stats["other"]["fraction"]))
    width = max(len(name) for name, _, _ in rows)
    total = sum(seconds for _, seconds, _ in rows)
    lines = [f"execution summary: {total:.2f} s of worker time over {stats['batches']:,} batches"]
    lines += [f"  {name:<{width}}  {s:8.2f} s  {100 * f:5.1f}%" for name, s, f in rows]
    name, share = bottleneck(stats)
    waited = 100 * stats["wait_fraction"]
    if verdict(stats) == "data":
        lines.append(
            f"bottleneck: data (the trainer waited {waited:.0f}% of the time); "
            f"{name} takes {100 * share:.0f}% of the workers' time"
        )
        lines.append(f"hint: {hint(stats, num_workers)}")
    else:
        lines.append(
            f"bottleneck: the training step (the trainer waited only {waited:.0f}% of the "
            f"time); the loader keeps up, its largest stage is {name} at {100 * share:.0f}%"
        )
        lines.append("hint: nothing to tune in the loader; make the step faster")
    return lines
