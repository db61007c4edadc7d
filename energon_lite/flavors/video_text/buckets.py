"""Open-Sora style buckets as a ``batch_group_criterion``: same-shape video batches.

Over 300 lines on purpose: it mirrors Open-Sora's bucket module (both config forms, the
assigner and the criterion), checked shape for shape against it; one format, one file.

A bucket is (resolution, frame count, aspect ratio); its target shape ``(T, H, W)`` and
batch size come from the config. Each sample goes to one bucket (or is dropped); the
grouped batcher then fills each bucket's batches separately, so a batch needs no padding.

Two config forms are accepted (:class:`BucketConfig`):

**Resolution form** (Open-Sora 1.2 / 2.0)::

    {"240p": {16: (1.0, 16), 32: (0.5, 8)}, "480p": {16: (0.3, 4)}, "1024": {1: (0.2, 8)}}

``{resolution: {num_frames: (keep_probability, batch_size)}}``; resolution names and their
aspect-ratio tables are in :mod:`energon_lite.flavors.video_text.aspect_ratios`. A sample of ``T`` frames and
``H x W`` pixels is assigned as Open-Sora's ``Bucket.get_bucket_id`` does:

1. Resolutions are tried from most to fewest pixels (ties: config order).
2. A resolution is skipped when ``H * W < 0.8 * its pixel budget`` (Open-Sora's ``approx``
   tolerance: a sample may be upscaled by up to 1/0.8 in area, not more).
3. An image (``T == 1``) can only go to frame count 1; without one, try the next resolution.
   A video takes the largest frame count ``t <= T`` other than 1 (videos never become
   images). ``T`` is the number of frames the sample can supply after any temporal
   subsampling; ``shape_of`` should return that.
4. The bucket is kept with probability ``keep_probability``; otherwise the sample falls to
   the next lower resolution and step 2 starts again. ``keep_probability`` 1 always keeps,
   0 never does, so samples reaching it always move on to the next resolution (its batch
   size may then be ``None``, as Open-Sora configs write).
   Open-Sora 2.0's pair form ``((keep_probability, next_frames_probability), batch_size)`` is
   honoured too: before the keep test, with ``next_frames_probability`` the sample moves on
   to the next smaller frame count of the same resolution. (Open-Sora 1.2 read the pair's
   second number the other way round, as the chance to stay; 2.0's reading is used here.)
5. The aspect ratio is the table entry whose H/W is nearest the sample's.
6. A sample no bucket keeps is dropped (``assign`` returns ``None``).

Unlike Open-Sora 1.2, a video with exactly ``t`` frames fills bucket ``t`` (1.2 demanded
``T > t``; 2.0 uses ``T >= t`` as here).

**Aspect-ratio form** (per aspect ratio: a weight and a batch size)::

    {"1:1": {256: {1: (1.0, 64), 17: (1.0, 16)}, 512: {17: (1.0, 4)}},
     "16:9": {"240x426": {17: (1.0, 8)}}, "9:16": {"426x240": {17: (1.0, 8)}}}

``{"W:H": {resolution: {num_frames: (weight, batch_size)}}}``. The ratio is written width
first (``"16:9"`` is landscape). A resolution is ``"HxW"`` (exact target), an int ``N`` (an
``N*N`` budget: ``H = N*sqrt(h/w)``, ``W = N*sqrt(w/h)``, each rounded to a multiple of 16 as
Open-Sora 2.0 does) or a resolution name (its table's entry nearest the ratio). The sample
takes the configured ratio nearest its H/W, then steps 1-3 and 6 above with the target's
own ``H * W`` as the budget. There is no keep probability: the first number is a *sampling
weight* for :func:`energon_lite.stages.bucket_sync.choose_bucket`; weight 0 acts like keep probability 0.

**Randomness.** Every keep / next-frames decision is a uniform number derived from
``(seed, rng_key, resolution, num_frames, kind)`` with :func:`energon_lite.rng.derive_seed`.
The loader passes the sample's ``__restore_key__`` (which includes the epoch) as
``rng_key``, so the bucket of a sample is the same on every rank, in every worker, and
after a resume, and changes from epoch to epoch. Nothing is stored.

**Synchronised buckets across ranks.** :func:`energon_lite.stages.bucket_sync.choose_bucket` picks the bucket of global step
``step`` from weights, identically on all ranks (see its docstring for the weights).
"""

from __future__ import annotations

import bisect
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from energon_lite.errors import ConfigError, SkipSample
from energon_lite.flavors.video_text.aspect_ratios import ratio_value, resolution_table
from energon_lite.rng import derive_seed

# Open-Sora's tolerance: a resolution accepts samples with >= 80% of its pixel budget.
# Written as integers (5 * pixels >= 4 * budget) so the boundary is exact.
_APPROX_NUM, _APPROX_DEN = 4, 5
_SHAPE_STEP = 16
_HXW = re.compile(r"^([1-9][0-9]*)x([1-9][0-9]*)$")


class BucketId(NamedTuple):
    """A bucket: hashable, and msgpack-able as a plain list (``BucketId(*lst)`` restores)."""

    resolution: str
    num_frames: int
    aspect_ratio: str
    height: int
    width: int
    batch_size: int

    @property
    def target(self) -> tuple[int, int, int]:
        """The shape ``(T, H, W)`` samples of this bucket are resized / cropped to."""
        return self.num_frames, self.height, self.width


@dataclass(frozen=True)
class _Frames:
    num_frames: int
    probability: float  # keep probability (resolution form) or sampling weight
    next_frames: float | None  # Open-Sora 2.0's chance to move to the next frame count
    batch_size: int  # 0 for a disabled bucket written with batch size None


@dataclass(frozen=True)
class _Resolution:
    name: str
    pixels: int
    ratios: tuple[tuple[float, str, int, int], ...]  # (H/W, key, height, width), sorted
    values: tuple[float, ...]  # the H/W column of ``ratios``, for bisect
    frames: tuple[_Frames, ...]  # most frames first

    def nearest(self, height: int, width: int) -> tuple[str, int, int]:
        values = self.values
        target = height / width
        i = bisect.bisect_left(values, target)
        # Ties go to the smaller ratio, like min() over a sorted table.
        if i == len(values) or (i > 0 and target - values[i - 1] <= values[i] - target):
            i -= 1
        _, key, h, w = self.ratios[i]
        return key, h, w


def _frame_key(where: str, raw: Any) -> int:
    if isinstance(raw, str) and raw.isdigit():
        raw = int(raw)  # JSON / YAML-from-JSON configs can only have string keys
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise ConfigError(f"{where}: frame count {raw!r} must be an int >= 1")
    return raw


def _probability(where: str, what: str, p: Any) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ConfigError(f"{where}: {what}={p!r} must be a number in [0, 1]")
    return float(p)


def _parse_frames(where: str, raw: Any, weighted: bool) -> tuple[_Frames, ...]:
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(f"{where} must be a non-empty {{num_frames: (p, batch_size)}} dict")
    frames: list[_Frames] = []
    for key, value in raw.items():
        nf = _frame_key(where, key)
        at = f"{where}[{key!r}]"
        if any(f.num_frames == nf for f in frames):
            raise ConfigError(f"{at}: frame count {nf} is given twice")
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            raise ConfigError(f"{at}={value!r} must be a pair (probability, batch_size)")
        prob, bs = value
        next_frames = None
        if isinstance(prob, (tuple, list)) and not weighted:
            if len(prob) != 2:
                raise ConfigError(f"{at}: {prob!r} must be (keep, next_frames) probabilities")
            next_frames = _probability(at, "next_frames_probability", prob[1])
            prob = prob[0]
        what = "weight" if weighted else "keep_probability"
        if weighted:
            if isinstance(prob, bool) or not isinstance(prob, (int, float)) or not prob >= 0:
                raise ConfigError(f"{at}: weight={prob!r} must be a number >= 0")
            prob = float(prob)
        else:
            prob = _probability(at, what, prob)
        if bs is None and prob == 0:
            pass  # a disabled bucket needs no batch size (Open-Sora writes (0.0, None))
        elif isinstance(bs, bool) or not isinstance(bs, int) or bs < 1:
            raise ConfigError(f"{at}: batch_size={bs!r} must be an int >= 1 (or None if {what}=0)")
        frames.append(_Frames(nf, prob, next_frames, bs or 0))
    frames.sort(key=lambda f: -f.num_frames)
    return tuple(frames)


def _resolution(
    name: str, pixels: int, table: Mapping[str, tuple[int, int]], frames: tuple[_Frames, ...]
) -> _Resolution:
    ratios = tuple(sorted((ratio_value(k), k, h, w) for k, (h, w) in table.items()))
    return _Resolution(name, pixels, ratios, tuple(r[0] for r in ratios), frames)


def _shape_for_ratio(where: str, key: Any, w_part: float, h_part: float) -> tuple[int, int]:
    """Target (H, W) of a resolution key under ratio ``w_part:h_part`` (aspect-ratio form)."""
    if isinstance(key, str) and key.isdigit():
        key = int(key)
    if isinstance(key, int) and not isinstance(key, bool) and key >= 1:
        h = round(key * math.sqrt(h_part / w_part) / _SHAPE_STEP) * _SHAPE_STEP
        w = round(key * math.sqrt(w_part / h_part) / _SHAPE_STEP) * _SHAPE_STEP
        return max(h, _SHAPE_STEP), max(w, _SHAPE_STEP)
    if isinstance(key, str) and (m := _HXW.match(key)):
        h, w = int(m.group(1)), int(m.group(2))
        want = h_part / w_part
        if abs(h / w - want) > 0.1 * want:
            raise ConfigError(
                f"{where}: resolution {key!r} has H/W {h / w:.3f} but the ratio key means "
                f"H/W {want:.3f} (ratios are written W:H, resolutions HxW); swap one of them"
            )
        return h, w
    if isinstance(key, str):
        _, table = resolution_table(key)  # raises ConfigError for an unknown name
        entry = min(table.items(), key=lambda kv: abs(ratio_value(kv[0]) - h_part / w_part))
        return entry[1]
    raise ConfigError(f"{where}: resolution {key!r} must be an int N, 'HxW' or a known name")


class BucketConfig:
    """A parsed, validated bucket config (either form; see the module docstring).

    ``groups`` is a list of ``(ratio value or None, [resolutions, most pixels first])``:
    one group with ``None`` for the resolution form, one per ratio for the aspect-ratio form.
    """

    weighted: bool
    groups: list[tuple[float | None, list[_Resolution]]]

    def __init__(self, config: BucketConfig | Mapping[Any, Any]) -> None:
        if isinstance(config, BucketConfig):
            self.weighted, self.groups = config.weighted, config.groups
            return
        if not isinstance(config, Mapping) or not config:
            raise ConfigError(f"bucket_config={config!r} must be a non-empty dict")
        forms = {isinstance(k, str) and ":" in k for k in config}
        if len(forms) > 1:
            raise ConfigError(
                f"bucket_config mixes aspect-ratio keys ('W:H') and resolution keys: "
                f"{list(config)!r}; use one form"
            )
        self.weighted = forms.pop()
        self.groups = []
        if not self.weighted:
            resolutions: list[_Resolution] = []
            for name, frames in config.items():
                if any(r.name == str(name) for r in resolutions):
                    raise ConfigError(f"bucket_config: resolution {str(name)!r} is given twice")
                pixels, table = resolution_table(str(name))
                parsed = _parse_frames(f"bucket_config[{name!r}]", frames, weighted=False)
                resolutions.append(_resolution(str(name), pixels, table, parsed))
            self.groups.append((None, sorted(resolutions, key=lambda r: -r.pixels)))
            return
        for ratio, resolutions_raw in config.items():
            try:
                w_part, h_part = (float(x) for x in ratio.split(":"))
            except ValueError:
                w_part = h_part = -1.0
            if not (w_part > 0 and h_part > 0):
                raise ConfigError(f"bucket_config key {ratio!r} must be a ratio 'W:H', e.g. '16:9'")
            if not isinstance(resolutions_raw, Mapping) or not resolutions_raw:
                raise ConfigError(f"bucket_config[{ratio!r}] must be a non-empty dict")
            resolutions = []
            for res, frames in resolutions_raw.items():
                where = f"bucket_config[{ratio!r}][{res!r}]"
                h, w = _shape_for_ratio(where, res, w_part, h_part)
                parsed = _parse_frames(where, frames, weighted=True)
                resolutions.append(_resolution(str(res), h * w, {ratio: (h, w)}, parsed))
            self.groups.append((h_part / w_part, sorted(resolutions, key=lambda r: -r.pixels)))
        self.groups.sort(key=lambda g: g[0] or 0.0)  # every group of this form has a ratio

    def bucket_ids(self) -> list[BucketId]:
        """Every enabled bucket (probability or weight > 0)."""
        return [bid for bid, _ in self._buckets()]

    def _buckets(self) -> Iterator[tuple[BucketId, float]]:
        for _, resolutions in self.groups:
            for res in resolutions:
                for f in res.frames:
                    if f.probability == 0:
                        continue
                    for _, key, h, w in res.ratios:
                        bid = BucketId(res.name, f.num_frames, key, h, w, f.batch_size)
                        yield bid, f.probability / len(res.ratios)

    def weights(self, counts: Mapping[BucketId, int] | None = None) -> dict[BucketId, float]:
        """Weights for :func:`energon_lite.stages.bucket_sync.choose_bucket`.

        * ``counts`` given (samples seen per bucket, e.g. a criterion's ``counts``): each
          bucket's weight is ``count / batch_size``, its number of batches, which is how
          often Open-Sora's sampler visits it in an epoch. The best choice when available.
        * aspect-ratio form: the configured sampling weights.
        * resolution form: the keep probability of (resolution, frames), spread evenly over
          the resolution's aspect ratios. A rough prior: it ignores how the data is spread.
        """
        if counts is not None:
            return {b: c / b.batch_size for b, c in counts.items() if c > 0}
        return dict(self._buckets())


class BucketAssigner:
    """Assigns a sample's ``(T, H, W)`` to a :class:`BucketId`, deterministically per key."""

    def __init__(self, config: BucketConfig | Mapping[Any, Any], seed: int) -> None:
        self.config = config if isinstance(config, BucketConfig) else BucketConfig(config)
        self.seed = int(seed)

    def _uniform(self, rng_key: Any, res: str, num_frames: int, kind: str) -> float:
        try:
            bits = derive_seed(self.seed, "bucket", rng_key, res, num_frames, kind)
        except TypeError as exc:
            raise ConfigError(f"rng_key={rng_key!r} is not msgpack-able: {exc}") from exc
        return (bits >> 11) * 2.0**-53

    def _passes(self, p: float, rng_key: Any, res: str, nf: int, kind: str) -> bool:
        # p == 1 needs no draw (as in Open-Sora); u < p makes p == 0 never pass.
        return p >= 1.0 or self._uniform(rng_key, res, nf, kind) < p

    def thinned(self, bucket: BucketId, keep: float, rng_key: Any) -> bool:
        """True when a sample of ``bucket`` is dropped by thinning with keep probability ``keep``."""
        return not self._passes(keep, rng_key, bucket.resolution, bucket.num_frames, "thin")

    def assign(self, num_frames: int, height: int, width: int, rng_key: Any) -> BucketId | None:
        """The bucket of a sample with ``num_frames`` frames of ``height x width``, or None."""
        if num_frames < 1 or height < 1 or width < 1:
            raise ValueError(f"sample shape must be >= 1 each, got {(num_frames, height, width)=}")
        pixels = height * width
        groups = self.config.groups
        if self.config.weighted:
            target = height / width
            values = [g[0] or 0.0 for g in groups]
            i = bisect.bisect_left(values, target)
            if i == len(values) or (i > 0 and target - values[i - 1] <= values[i] - target):
                i -= 1
            groups = [groups[i]]
        for _, resolutions in groups:
            for res in resolutions:
                if _APPROX_DEN * pixels < _APPROX_NUM * res.pixels:
                    continue
                chosen = self._frames_for(res, num_frames, rng_key)
                if chosen is not None:
                    key, h, w = res.nearest(height, width)
                    return BucketId(res.name, chosen.num_frames, key, h, w, chosen.batch_size)
        return None

    def distribution(self, num_frames: int, height: int, width: int) -> dict[BucketId, float]:
        """``P(assign(...) == bucket)`` over the random keys, exactly (drops not listed).

        Mirrors :meth:`assign`: each keep / next-frames decision is an independent uniform
        number, so the probability mass is pushed through the same steps.
        """
        if num_frames < 1 or height < 1 or width < 1:
            raise ValueError(f"sample shape must be >= 1 each, got {(num_frames, height, width)=}")
        out: dict[BucketId, float] = {}
        groups = self.config.groups
        if self.config.weighted:
            probe = self.assign(num_frames, height, width, None)  # no random decision here
            return {} if probe is None else {probe: 1.0}
        mass = 1.0
        for _, resolutions in groups:
            for res in resolutions:
                if _APPROX_DEN * height * width < _APPROX_NUM * res.pixels or mass <= 0:
                    continue
                key, h, w = res.nearest(height, width)
                here = mass  # mass still looking at this resolution's frame counts
                for f in res.frames:
                    if (f.num_frames == 1) != (num_frames == 1) or num_frames < f.num_frames:
                        continue
                    move = 0.0 if f.next_frames is None else min(1.0, f.next_frames)
                    stay = here * (1.0 - move)
                    kept = stay * min(1.0, f.probability)
                    if kept > 0:
                        bid = BucketId(res.name, f.num_frames, key, h, w, f.batch_size)
                        out[bid] = out.get(bid, 0.0) + kept
                    mass -= kept  # the rest (not kept, or past the last frame count) falls on
                    here *= move
        return out

    def _frames_for(self, res: _Resolution, num_frames: int, rng_key: Any) -> _Frames | None:
        """The frame bucket this resolution keeps, or None to fall to the next resolution."""
        weighted = self.config.weighted
        for f in res.frames:
            if (f.num_frames == 1) != (num_frames == 1) or num_frames < f.num_frames:
                continue
            if f.next_frames is not None and self._passes(
                f.next_frames, rng_key, res.name, f.num_frames, "next"
            ):
                continue
            if weighted:
                return f if f.probability > 0 else None
            if self._passes(f.probability, rng_key, res.name, f.num_frames, "keep"):
                return f
            # Not kept: Open-Sora moves on to the next resolution, not to fewer frames.
            return None
        return None


def _restore_key(sample: Any) -> Any:
    if isinstance(sample, Mapping):
        key = sample.get("__restore_key__")
    else:
        key = getattr(sample, "__restore_key__", None)
    if key is None:
        raise ConfigError(
            f"{type(sample).__name__} sample has no __restore_key__; bucketing derives its "
            f"random decisions from it, so pass samples as the loader produces them"
        )
    return key


def _shape_from_fields(sample: Any) -> tuple[int, int, int]:
    """``(num_frames, height, width)`` from fields of those names (Open-Sora's CSV columns)."""
    if isinstance(sample, Mapping):
        return sample["num_frames"], sample["height"], sample["width"]
    return sample.num_frames, sample.height, sample.width


class BucketCriterion:
    """``batch_group_criterion(sample) -> (BucketId, batch_size)``; drops raise SkipSample.

    ``counts`` (per bucket) and ``dropped`` are running statistics of this object, for logs
    and for :meth:`BucketConfig.weights`; they are not loader state.
    """

    def __init__(
        self,
        assigner: BucketAssigner,
        shape_of: Callable[[Any], tuple[int, int, int]] = _shape_from_fields,
    ) -> None:
        self.assigner = assigner
        self.shape_of = shape_of
        self.counts: Counter[BucketId] = Counter()
        self.dropped = 0

    def __call__(self, sample: Any) -> tuple[BucketId, int]:
        num_frames, height, width = self.shape_of(sample)
        bucket = self.assigner.assign(num_frames, height, width, _restore_key(sample))
        if bucket is None:
            self.dropped += 1
            raise SkipSample()
        self.counts[bucket] += 1
        return bucket, bucket.batch_size


def make_batch_group_criterion(
    config: BucketConfig | Mapping[Any, Any],
    seed: int,
    shape_of: Callable[[Any], tuple[int, int, int]] = _shape_from_fields,
) -> BucketCriterion:
    """A ``batch_group_criterion`` for ``config``; ``shape_of(sample) -> (T, H, W)``.

    The default ``shape_of`` reads ``num_frames``, ``height``, ``width`` (keys or attributes).
    """
    return BucketCriterion(BucketAssigner(config, seed), shape_of)
