"""What ``prepare --exclude`` leaves out, resolved against the shards found before any scan.

An entry is, in this order:

* a shard's path relative to the dataset (brace patterns allowed: ``parts/data-{0..2}.tar``):
  the shard is left out of the dataset (not indexed, not in ``.info.json``, in no split), so
  an empty or broken tar can be excluded;
* ``<shard>/<sample key>`` (braces allowed): that sample is left out; the entry is written to
  ``split.yaml``'s ``exclude`` and the keys are checked against the scan;
* otherwise a regular expression searched anywhere in each shard's path, as Energon's
  ``--exclude`` takes it: every shard it matches is left out.

An entry that matches nothing is refused before any shard is read, naming the entry and the
shard names nearest to it, so a typo never writes a dataset that later fails to open.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from energon_lite.errors import ConfigError, DatasetFormatError, short_repr
from energon_lite.shards.meta import expand
from energon_lite.shards.tar_index import ShardScan, key_hash


@dataclass
class Exclusions:
    """Whole shards left out, sample entries for ``split.yaml``, and what each entry matched."""

    shards: list[str] = field(default_factory=list)  # in the order found
    sample_entries: list[str] = field(default_factory=list)  # verbatim, for split.yaml
    samples: dict[str, set[str]] = field(default_factory=dict)  # shard -> sample keys
    matched: dict[str, list[str]] = field(default_factory=dict)  # entry -> shards it left out

    @property
    def num_samples(self) -> int:
        """Samples left out by sample entries (in shards that are not left out whole)."""
        return sum(len(keys) for keys in self.samples.values())


def nearest_shards(entry: str, shards: Sequence[str], n: int = 3) -> list[str]:
    """The shard names most like ``entry`` (by full path, then by file name)."""
    close = difflib.get_close_matches(entry, shards, n=n, cutoff=0.4)
    if len(close) < n:
        names = {s.rsplit("/", 1)[-1]: s for s in shards}
        base = entry.rsplit("/", 1)[-1]
        for name in difflib.get_close_matches(base, list(names), n=n, cutoff=0.4):
            if names[name] not in close:
                close.append(names[name])
    return close[:n] or list(shards[:n])


def _refuse(entry: str, shards: Sequence[str], why: str) -> ConfigError:
    near = ", ".join(nearest_shards(entry, shards))
    return ConfigError(
        f"--exclude {short_repr(entry)}: {why}; nearest shard names: {near}. Give a shard's "
        "path relative to the dataset (e.g. 'parts/data-3.tar'), '<shard>/<sample key>', or a "
        "regular expression searched in the shard paths (Energon's form)"
    )


def resolve_excludes(entries: Sequence[str], shards: Sequence[str]) -> Exclusions:
    """Resolve every ``--exclude`` entry against ``shards``; ConfigError for one that
    matches nothing."""
    known = set(shards)
    out = Exclusions()
    whole: set[str] = set()
    for entry in entries:
        if not isinstance(entry, str) or not entry:
            raise _refuse(str(entry), shards, "an empty entry")
        try:
            names = expand(entry, f"--exclude {short_repr(entry)}")
        except DatasetFormatError as exc:
            raise ConfigError(str(exc)) from None
        hits: list[str] = []
        samples: list[tuple[str, str]] = []
        unresolved: list[str] = []
        for name in names:
            shard, sep, key = name.partition(".tar/")
            if name in known:
                hits.append(name)
            elif sep and key and shard + ".tar" in known:
                samples.append((shard + ".tar", key))
            else:
                unresolved.append(name)
        if unresolved and (hits or samples):
            raise _refuse(
                unresolved[0], shards, f"names no shard (from the pattern {short_repr(entry)})"
            )
        if unresolved:  # Energon's form: a regex searched in every shard's path
            try:
                regex = re.compile(entry)
            except re.error as exc:
                raise _refuse(entry, shards, f"names no shard and is no regex ({exc})") from None
            hits = [s for s in shards if regex.search(s)]
            if not hits:
                raise _refuse(entry, shards, "names no shard and matches none as a regex")
        if samples:
            out.sample_entries.append(entry)
            for shard, key in samples:
                out.samples.setdefault(shard, set()).add(key)
        out.matched[entry] = hits
        whole.update(hits)
    out.shards = [s for s in shards if s in whole]
    for shard in out.shards:
        out.samples.pop(shard, None)  # the whole shard is out anyway
    if len(out.shards) == len(shards):
        raise ConfigError(
            f"--exclude {' '.join(short_repr(e) for e in entries)} leaves out every one of the "
            f"{len(shards)} shard(s); nothing would be prepared"
        )
    return out


def check_excluded_keys(
    exclusions: Exclusions, shards: Sequence[str], scans: Sequence[ShardScan]
) -> None:
    """Every excluded sample key must be in its shard (by the scan's key hashes)."""
    scan_of = dict(zip(shards, scans))
    for shard, keys in exclusions.samples.items():
        present = set(scan_of[shard].key_hashes.tolist())
        missing = sorted(k for k in keys if key_hash(k) not in present)
        if missing:
            raise ConfigError(
                f"--exclude: shard {shard} has no sample with key(s) {short_repr(missing)} "
                f"(it holds {scan_of[shard].count} samples); write the key as in the tar "
                "member names without the part, e.g. '<shard>/000042' for 000042.jpg"
            )
