"""The mix a loader delivered: per blend source, samples and tokens against the target share.

Read from the worker states the trainer already keeps (the state of the last batch it
received from each worker), so it describes exactly the batches handed out, costs nothing
while loading and needs no stats probe:

* a blend's saved level (its class's ``mix_tally``: a weighted blend's ``tally``) counts, per source, the samples it drew and (with
  ``weight_unit: tokens``) the samples costed and their cost;
* the samples still sitting in a buffer (shuffle, packing, group buckets: each stage's
  ``held_keys``) were drawn but not delivered: they are taken off per source, and so is
  the mean cost of those held above the stage that reports costs (``MIX_COSTS``);
* the target share is each leaf's weight at the current step (``base`` + batches received).

Counts restart with an elastic restore (the new workers' tallies start at zero).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from energon_lite.resume.levels import walk_states
from energon_lite.stages.base import stage_class
from energon_lite.state.restore_key import from_plain, sample_keys


def delivered_mix(
    states: list[Any], leaves: list[Any], in_pass: int, leaf_base: int = 0
) -> dict[str, Any] | None:
    """``{"step", "sources": [{"path", "target", "samples", "sample_share", "tokens",
    "token_share"}]}`` from the workers' last received ``states``; None without a weighted
    blend (or before any batch)."""
    drawn = [0] * len(leaves)
    costed = [0] * len(leaves)
    cost = [0.0] * len(leaves)
    held: Counter[int] = Counter()
    held_costed: Counter[int] = Counter()
    base, found = 0, False
    for tree in states:
        after_cost = True  # levels are walked from the batches down to the readers
        for level in walk_states(tree):
            cls = stage_class(level.get("type"))
            if cls is None:
                continue
            if cls.MIX_COSTS:
                after_cost = False
            found_here = cls.mix_tally(level)
            if found_here is not None:
                tally, level_base = found_here
                if len(tally) != len(leaves):
                    return None  # a blend inside a wrapper's chain: not the leaves' blend
                found = True
                base = max(base, level_base)
                for i, (d, c, t) in enumerate(tally):
                    drawn[i] += int(d)
                    costed[i] += int(c)
                    cost[i] += float(t)
                break  # the stages below the blend hold samples not drawn yet
            for plain in cls.held_keys(level):
                for key in sample_keys(from_plain(plain)):
                    held[key.leaf - leaf_base] += 1
                    if after_cost:
                        held_costed[key.leaf - leaf_base] += 1
    if not found:
        return None
    step = base + in_pass
    weights = [leaf.weight(step) if callable(leaf.weight) else leaf.weight for leaf in leaves]
    total_weight = sum(w or 0.0 for w in weights) or 1.0
    samples = [max(0, drawn[i] - held[i]) for i in range(len(leaves))]
    tokens = [
        max(0.0, cost[i] - held_costed[i] * (cost[i] / costed[i] if costed[i] else 0.0))
        for i in range(len(leaves))
    ]
    all_samples, all_tokens = sum(samples), sum(tokens)
    costs_known = any(costed)
    return {
        "step": step,
        "sources": [
            {
                "path": f"{leaf.path} (split {leaf.split_part})",
                "target": (weights[i] or 0.0) / total_weight,
                "samples": samples[i],
                "sample_share": samples[i] / all_samples if all_samples else 0.0,
                "tokens": tokens[i] if costs_known else None,
                "token_share": tokens[i] / all_tokens if costs_known and all_tokens else None,
            }
            for i, leaf in enumerate(leaves)
        ],
    }


def format_mix(mix: dict[str, Any]) -> list[str]:
    """The delivered mix as lines of text (``energon-lite bench``, a trainer's log)."""
    lines = [f"mix at step {mix['step']:,} (delivered vs target share):"]
    for source in mix["sources"]:
        line = (
            f"  {source['path']}: target {100 * source['target']:.1f}%, "
            f"{source['samples']:,} samples ({100 * source['sample_share']:.1f}%)"
        )
        if source["tokens"] is not None:
            line += f", {source['tokens']:,.0f} tokens ({100 * source['token_share']:.1f}%)"
        lines.append(line)
    return lines
