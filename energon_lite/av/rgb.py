"""Decoded video frames to RGB, written straight into the caller's array.

PyAV's ``VideoReformatter`` converts a frame into a new frame of its own, which a clip then
copies into its array: for 64 frames of 640x360 that copy is 44 MB per sample, about a tenth
of everything a multi-range sample costs besides the h264 decoder itself
(benchmarks/README.md, "Video III"). ``RgbScaler.into`` hands the same library PyAV bundles
(libswscale) the decoded frame's planes and the clip's rows, so the conversion is the only
write. A clip's array is a ``Frames``: swscale's vector code may write a few bytes past a
row's end, so the array has room after its last row.

The frames stay exact to the byte. The scale is the one PyAV's ``reformat(format="rgb24",
interpolation="BILINEAR")`` runs (one thread, the frame's colour space and range). Each kind of
conversion (source format, sizes, colour tags, the alignment of the rows) is checked once per
process: its first frame is converted both ways and compared. A kind whose bytes differ, a
libswscale that cannot be found beside PyAV, or ``ENERGON_LITE_VIDEO_RGB=pyav`` keeps PyAV's
conversion and the copy, as before.
"""

from __future__ import annotations

import ctypes
import glob
import logging
import os
from typing import Any

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from energon_lite.errors import ConfigError

logger = logging.getLogger(__name__)

ENV = "ENERGON_LITE_VIDEO_RGB"
_CHOICES = ("auto", "pyav")
_SWS_BILINEAR = 2
_AV_PIX_FMT_RGB24 = 2
_AVCOL_RANGE_JPEG = 2
_SWS_CS_DEFAULT = 5
# Colour spaces (AVColorSpace values, which equal swscale's SWS_CS_* ones for these) whose
# coefficients swscale has; another tag converts as an untagged frame, as in PyAV
_SWS_SPACES = frozenset({1, 4, 5, 6, 7, 9, 10})

# PyAV 17 scales with swscale's slice threads (one per CPU unless told); before 17 it has
# one thread and no ``threads`` argument
_ONE_THREAD: dict[str, Any] = {"threads": 1} if int(av.__version__.split(".", 1)[0]) >= 17 else {}

_P = ctypes.c_void_p
_Planes = _P * 4
_Strides = ctypes.c_int * 4


class _Swscale:
    """The libswscale and libavutil PyAV loaded, through ctypes (only what ``into`` calls)."""

    def __init__(self, swscale: str, avutil: str) -> None:
        sws = ctypes.CDLL(swscale)
        util = ctypes.CDLL(avutil)
        sws.sws_getContext.restype = _P
        sws.sws_getContext.argtypes = [ctypes.c_int] * 7 + [_P, _P, _P]
        sws.sws_scale.restype = ctypes.c_int
        sws.sws_scale.argtypes = [_P, _Planes, _Strides, ctypes.c_int, ctypes.c_int, _Planes,
                                  _Strides]  # fmt: skip
        sws.sws_getCoefficients.restype = _P
        sws.sws_getCoefficients.argtypes = [ctypes.c_int]
        sws.sws_setColorspaceDetails.restype = ctypes.c_int
        sws.sws_setColorspaceDetails.argtypes = [_P, _P, ctypes.c_int, _P, ctypes.c_int,
                                                 ctypes.c_int, ctypes.c_int, ctypes.c_int]  # fmt: skip
        sws.sws_freeContext.restype = None
        sws.sws_freeContext.argtypes = [_P]
        util.av_get_pix_fmt.restype = ctypes.c_int
        util.av_get_pix_fmt.argtypes = [ctypes.c_char_p]
        self.sws, self.util = sws, util
        self.formats: dict[str, int] = {}

    def pix_fmt(self, name: str) -> int:
        if name not in self.formats:
            self.formats[name] = self.util.av_get_pix_fmt(name.encode())
        return self.formats[name]


def _find(name: str) -> str | None:
    """PyAV's own copy of an FFmpeg library: bundled beside the package (wheels), else the
    one already mapped into this process (PyAV built against the system's FFmpeg)."""
    here = os.path.dirname(os.path.dirname(av.__file__))
    for path in sorted(glob.glob(os.path.join(here, "av.libs", f"lib{name}-*.so*"))):
        return path
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(" ", 1)[-1].strip()
                if os.path.basename(path).startswith(f"lib{name}") and ".so" in path:
                    return path
    except OSError:
        pass
    return None


def _load() -> _Swscale | None:
    choice = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if choice not in _CHOICES:
        raise ConfigError(f"{ENV}={os.environ[ENV]!r}: expected one of {', '.join(_CHOICES)}")
    if choice == "pyav":
        return None
    swscale, avutil = _find("swscale"), _find("avutil")
    if swscale is None or avutil is None:
        return None
    try:
        return _Swscale(swscale, avutil)
    except (OSError, AttributeError) as exc:  # not loadable, or a symbol missing
        logger.debug("RGB conversion through PyAV only: %s", exc)
        return None


_lib: _Swscale | None = _load()
# Per kind of conversion: whether writing straight into the array gave PyAV's bytes
_EXACT: dict[tuple[Any, ...], bool] = {}


# swscale's vector code may write whole blocks of pixels past a row's end (18 bytes measured
# for rows of 250 pixels): ``Frames`` leaves this much room after its last frame
_ROOM = 1024


class Frames:
    """Room for ``count`` RGB frames of ``height`` x ``width`` in one uninitialised array,
    ``array`` (count, height, width, 3), with room after it for what swscale writes past the
    last row; ``RgbScaler.into`` converts a frame straight into one of its places."""

    def __init__(self, count: int, height: int, width: int) -> None:
        self.frame_bytes = height * width * 3
        flat = np.empty(count * self.frame_bytes + _ROOM, np.uint8)
        self.array = flat[: count * self.frame_bytes].reshape(count, height, width, 3)
        self.address: int = flat.__array_interface__["data"][0]


def active() -> bool:
    """Whether frames can be converted straight into the caller's array in this process."""
    return _lib is not None


class RgbScaler:
    """Converts one decoder's frames to RGB (bilinear, one thread).

    One per decoder, kept over its frames: ``frame.to_ndarray(format=...)`` would set a
    scaler up anew for every frame, which costs more than the conversion on small frames.
    One thread, as the codecs: freeing a scaler with slice threads in a process forked after
    it was made waits forever for them.
    """

    def __init__(self) -> None:
        self._pyav = VideoReformatter()
        self._context: int | None = None
        self._setup: tuple[Any, ...] | None = None

    def rgb(self, frame: av.VideoFrame, size: tuple[int, int] | None) -> np.ndarray:
        """``frame`` in RGB (resized to ``size`` = (width, height)) as a new array."""
        width, height = size if size is not None else (None, None)
        return self._pyav.reformat(
            frame, format="rgb24", width=width, height=height, interpolation="BILINEAR",
            **_ONE_THREAD,
        ).to_ndarray()  # fmt: skip

    def into(
        self, frame: av.VideoFrame, size: tuple[int, int] | None, frames: Frames, index: int
    ) -> None:
        """``frame`` in RGB (resized to ``size``) written into ``frames.array[index]``."""
        out = frames.array[index]
        width, height = size if size is not None else (frame.width, frame.height)
        if out.shape != (height, width, 3):
            raise ValueError(f"an RGB frame of {width}x{height} does not fit {out.shape}")
        address = frames.address + index * frames.frame_bytes
        kind = self._kind(frame, width, height, address)
        exact = _EXACT.get(kind) if kind is not None else False
        if exact is False:
            out[...] = self.rgb(frame, size)
            return
        self._scale(frame, width, height, address, kind)
        if exact is None:  # the first of its kind in this process: check it against PyAV
            want = self.rgb(frame, size)
            _EXACT[kind] = bool(np.array_equal(out, want))
            if not _EXACT[kind]:
                logger.debug("RGB conversion %s through PyAV: bytes differ", kind)
                out[...] = want

    def _kind(self, frame: av.VideoFrame, width: int, height: int, address: int) -> Any:
        name = frame.format.name
        if _lib is None or name == "rgb24":
            return None
        source = _lib.pix_fmt(name)
        if source < 0:
            return None
        space = frame.colorspace
        space = space if space in _SWS_SPACES else _SWS_CS_DEFAULT
        full = frame.color_range == _AVCOL_RANGE_JPEG or name.startswith("yuvj")
        # swscale takes aligned rows on other code paths: the alignment is part of the kind
        aligned = address % 16 == 0 and (width * 3) % 16 == 0
        return (source, frame.width, frame.height, width, height, space, full, aligned)

    def _scale(
        self, frame: av.VideoFrame, width: int, height: int, address: int, kind: Any
    ) -> None:
        assert _lib is not None
        setup = kind[:-1]
        if setup != self._setup:
            self.close()
            source, src_w, src_h, _, _, space, full, _ = kind
            context = _lib.sws.sws_getContext(src_w, src_h, source, width, height,
                                              _AV_PIX_FMT_RGB24, _SWS_BILINEAR, None, None,
                                              None)  # fmt: skip
            if not context:
                raise MemoryError("could not allocate a swscale context")
            self._context, self._setup = context, setup
            table = _lib.sws.sws_getCoefficients(space)
            rgb_table = _lib.sws.sws_getCoefficients(_SWS_CS_DEFAULT)
            _lib.sws.sws_setColorspaceDetails(context, table, int(full), rgb_table, 1, 0,
                                              1 << 16, 1 << 16)  # fmt: skip
        planes = frame.planes
        source_planes = _Planes(*[p.buffer_ptr for p in planes])
        strides = _Strides(*[p.line_size for p in planes])
        rows = _lib.sws.sws_scale(self._context, source_planes, strides, 0, frame.height,
                                  _Planes(address), _Strides(width * 3))  # fmt: skip
        if rows != height:
            raise RuntimeError(f"swscale wrote {rows} of {height} rows ({kind})")

    def close(self) -> None:
        """Free the swscale context (a later ``into`` makes a new one)."""
        if self._context is not None and _lib is not None:
            _lib.sws.sws_freeContext(self._context)
        self._context, self._setup = None, None

    def __del__(self) -> None:
        self.close()
