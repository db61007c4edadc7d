"""Open-Sora's aspect-ratio tables: for each resolution name, its pixel budget and the
target ``(height, width)`` of every aspect-ratio bucket.

Three families of names, each matching the Open-Sora release that introduced it:

* Video names ``"144p" "240p" "360p" "480p" "720p" "1080p" "2k" "4k"`` (Open-Sora 1.2):
  17 ratios keyed by H/W written with two decimals (``"0.56"`` is 9:16 landscape,
  ``"1.78"`` is 16:9 portrait). The pixel budget is the 16:9 frame, e.g. 240p = 240 * 426.
  Open-Sora's tables are not reproduced by any one rounding rule (several entries were
  edited by hand, and a few labels do not match their shapes, e.g. ``"2.08"`` is 462x222),
  so they are stored here as data, byte for byte.
* Image names ``"256" "512" "1024" "2048"`` (PixArt's tables, used by Open-Sora 1.x):
  40 ratios, budget N*N. The 1024 table is stored; the others are it scaled by N/1024
  exactly, as in Open-Sora. (Open-Sora's ``"2880"`` table is not a scaling and is left out.)
* ``"<N>px"`` names such as ``"256px"`` or ``"768px"`` (Open-Sora 2.0): budget N*N and a
  table computed by :func:`px_aspect_ratios`, keyed ``"W:H"`` (``"16:9"`` is landscape).

The nearest bucket of a sample is the ratio whose H/W is closest to the sample's H/W
(:func:`nearest_ratio`); ties go to the smaller ratio.
"""

from __future__ import annotations

import math
import re
from functools import cache

from energon_lite.errors import ConfigError

# fmt: off
_VIDEO_TABLES: dict[str, tuple[int, dict[str, tuple[int, int]]]] = {
    "144p": (36864, {
        "0.38": (117, 312), "0.43": (125, 291), "0.48": (133, 277), "0.50": (135, 270),
        "0.53": (139, 262), "0.54": (141, 260), "0.56": (144, 256), "0.62": (151, 241),
        "0.67": (156, 234), "0.75": (166, 221), "1.00": (192, 192), "1.33": (221, 165),
        "1.50": (235, 156), "1.78": (256, 144), "1.89": (263, 139), "2.00": (271, 135),
        "2.08": (277, 132),
    }),
    "240p": (102240, {
        "0.38": (196, 522), "0.43": (210, 490), "0.48": (222, 462), "0.50": (226, 452),
        "0.53": (232, 438), "0.54": (236, 436), "0.56": (240, 426), "0.62": (252, 404),
        "0.67": (262, 393), "0.75": (276, 368), "1.00": (320, 320), "1.33": (370, 278),
        "1.50": (392, 262), "1.78": (426, 240), "1.89": (440, 232), "2.00": (452, 226),
        "2.08": (462, 222),
    }),
    "360p": (230400, {
        "0.38": (294, 784), "0.43": (314, 732), "0.48": (332, 692), "0.50": (340, 680),
        "0.53": (350, 662), "0.54": (352, 652), "0.56": (360, 640), "0.62": (380, 608),
        "0.67": (392, 588), "0.75": (416, 554), "1.00": (480, 480), "1.33": (554, 416),
        "1.50": (588, 392), "1.78": (640, 360), "1.89": (660, 350), "2.00": (678, 340),
        "2.08": (692, 332),
    }),
    "480p": (409920, {
        "0.38": (392, 1046), "0.43": (420, 980), "0.48": (444, 925), "0.50": (452, 904),
        "0.53": (466, 880), "0.54": (470, 870), "0.56": (480, 854), "0.62": (506, 810),
        "0.67": (522, 784), "0.75": (554, 738), "1.00": (640, 640), "1.33": (740, 555),
        "1.50": (784, 522), "1.78": (854, 480), "1.89": (880, 466), "2.00": (906, 454),
        "2.08": (924, 444),
    }),
    "720p": (921600, {
        "0.38": (588, 1568), "0.43": (628, 1466), "0.48": (666, 1388), "0.50": (678, 1356),
        "0.53": (698, 1318), "0.54": (706, 1306), "0.56": (720, 1280), "0.62": (758, 1212),
        "0.67": (784, 1176), "0.75": (832, 1110), "1.00": (960, 960), "1.33": (1108, 832),
        "1.50": (1176, 784), "1.78": (1280, 720), "1.89": (1320, 698), "2.00": (1358, 680),
        "2.08": (1386, 666),
    }),
    "1080p": (2073600, {
        "0.38": (882, 2352), "0.43": (942, 2198), "0.48": (998, 2080), "0.50": (1018, 2036),
        "0.53": (1048, 1980), "0.54": (1058, 1958), "0.56": (1080, 1920), "0.62": (1138, 1820),
        "0.67": (1176, 1764), "0.75": (1248, 1664), "1.00": (1440, 1440), "1.33": (1662, 1246),
        "1.50": (1764, 1176), "1.78": (1920, 1080), "1.89": (1980, 1048), "2.00": (2036, 1018),
        "2.08": (2078, 998),
    }),
    "2k": (3686400, {
        "0.38": (1176, 3136), "0.43": (1256, 2930), "0.48": (1330, 2770), "0.50": (1358, 2716),
        "0.53": (1398, 2640), "0.54": (1412, 2612), "0.56": (1440, 2560), "0.62": (1518, 2428),
        "0.67": (1568, 2352), "0.75": (1662, 2216), "1.00": (1920, 1920), "1.33": (2218, 1664),
        "1.50": (2352, 1568), "1.78": (2560, 1440), "1.89": (2638, 1396), "2.00": (2716, 1358),
        "2.08": (2772, 1330),
    }),
    "4k": (8294400, {
        "0.38": (1764, 4704), "0.43": (1886, 4400), "0.48": (1996, 4158), "0.50": (2036, 4072),
        "0.53": (2096, 3960), "0.54": (2118, 3918), "0.56": (2160, 3840), "0.62": (2276, 3642),
        "0.67": (2352, 3528), "0.75": (2494, 3326), "1.00": (2880, 2880), "1.33": (3326, 2494),
        "1.50": (3528, 2352), "1.78": (3840, 2160), "1.89": (3958, 2096), "2.00": (4072, 2036),
        "2.08": (4156, 1994),
    }),
}

_PIXART_1024: dict[str, tuple[int, int]] = {
    "0.25": (512, 2048), "0.26": (512, 1984), "0.27": (512, 1920), "0.28": (512, 1856),
    "0.32": (576, 1792), "0.33": (576, 1728), "0.35": (576, 1664), "0.40": (640, 1600),
    "0.42": (640, 1536), "0.48": (704, 1472), "0.50": (704, 1408), "0.52": (704, 1344),
    "0.57": (768, 1344), "0.60": (768, 1280), "0.68": (832, 1216), "0.72": (832, 1152),
    "0.78": (896, 1152), "0.82": (896, 1088), "0.88": (960, 1088), "0.94": (960, 1024),
    "1.00": (1024, 1024), "1.07": (1024, 960), "1.13": (1088, 960), "1.21": (1088, 896),
    "1.29": (1152, 896), "1.38": (1152, 832), "1.46": (1216, 832), "1.67": (1280, 768),
    "1.75": (1344, 768), "2.00": (1408, 704), "2.09": (1472, 704), "2.40": (1536, 640),
    "2.50": (1600, 640), "2.89": (1664, 576), "3.00": (1728, 576), "3.11": (1792, 576),
    "3.62": (1856, 512), "3.75": (1920, 512), "3.88": (1984, 512), "4.00": (2048, 512),
}
# fmt: on

_IMAGE_SIZES = (256, 512, 1024, 2048)

# Open-Sora 2.0's ratio list, written W:H; each one's mirror (H:W) is added too.
_PX_RATIOS = ("2.39:1", "2:1", "16:9", "1.85:1", "9:16", "5:8", "3:2", "4:3", "1:1")

_PX_NAME = re.compile(r"^([1-9][0-9]*)px$")


def px_aspect_ratios(total_pixels: int, step: int = 16) -> dict[str, tuple[int, int]]:
    """Open-Sora 2.0's table for a pixel budget: ``{"W:H": (height, width)}``.

    For each ratio ``w:h``: width = sqrt(budget * w / h) and height = budget / width, each
    rounded down to a multiple of ``step`` (the autoencoder's spatial compression); then one
    step up or down on either side is taken when it brings H*W closer to the budget (the
    four candidates are tried in turn, each against the best so far). A ratio whose shape an
    earlier ratio already produced is dropped (with its mirror). Mirrors ``h:w`` map to
    ``(width, height)``.
    """
    table: dict[str, tuple[int, int]] = {}
    mirrors: dict[str, tuple[int, int]] = {}
    for name in _PX_RATIOS:
        w_part, h_part = (float(x) for x in name.split(":"))
        width = int(math.sqrt(total_pixels * w_part / h_part) // step) * step
        height = int(total_pixels / width // step) * step
        best = abs(height * width - total_pixels)
        candidates = [(height - step, width), (height + step, width)]
        candidates += [(height, width - step), (height, width + step)]
        for h, w in candidates:
            if abs(h * w - total_pixels) < best:
                height, width, best = h, w, abs(h * w - total_pixels)
        if (height, width) in table.values():
            continue
        table[name] = (height, width)
        mirrors[":".join(reversed(name.split(":")))] = (width, height)
    table.update(mirrors)
    return table


def ratio_value(key: str) -> float:
    """The H/W a table key stands for: ``"0.56"`` -> 0.56, ``"16:9"`` (W:H) -> 9/16."""
    if ":" in key:
        w_part, h_part = (float(x) for x in key.split(":"))
        return h_part / w_part
    return float(key)


@cache
def resolution_table(name: str) -> tuple[int, dict[str, tuple[int, int]]]:
    """``(pixel budget, {ratio key: (height, width)})`` for a resolution name.

    Raises :class:`ConfigError` for an unknown name. The returned dict is shared: do not
    modify it.
    """
    if name in _VIDEO_TABLES:
        return _VIDEO_TABLES[name]
    if name.isdigit() and int(name) in _IMAGE_SIZES:
        n = int(name)
        scaled = {k: (h * n // 1024, w * n // 1024) for k, (h, w) in _PIXART_1024.items()}
        return n * n, scaled
    match = _PX_NAME.match(name)
    if match:
        n = int(match.group(1))
        return n * n, px_aspect_ratios(n * n)
    raise ConfigError(f"unknown resolution {name!r}; known: {', '.join(known_resolutions())}")


def known_resolutions() -> list[str]:
    """The table names, fewest pixels first (plus any ``"<N>px"``)."""
    names = [*_VIDEO_TABLES, *(str(n) for n in _IMAGE_SIZES)]
    return [*sorted(names, key=lambda n: resolution_table(n)[0]), "<N>px"]


def nearest_ratio(height: int, width: int, table: dict[str, tuple[int, int]]) -> str:
    """The key of ``table`` whose H/W is nearest ``height / width`` (ties: smaller ratio)."""
    if height <= 0 or width <= 0:
        raise ConfigError(f"sample shape needs height, width >= 1, got {height=}, {width=}")
    target = height / width
    return min(table, key=lambda k: (abs(ratio_value(k) - target), ratio_value(k)))
