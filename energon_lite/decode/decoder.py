"""``SampleDecoder``: turns the raw bytes of a sample's parts into Python values by extension.

The extension is the part name's last suffix (``seg.jpg`` -> ``jpg``). Unknown extensions
stay bytes. ``TaskEncoder.decoder = None`` keeps every part raw. Pickled parts (``.pyd``,
``.pickle``) run code when unpickled, so they are refused unless the user allows it.
"""

from __future__ import annotations

import functools
import importlib.util
import io
import json
import os
import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import msgpack
import numpy as np

from energon_lite.decode.image_modes import MAX_IMAGE_PIXELS, check_image_mode
from energon_lite.decode.sniff import guess_extension
from energon_lite.errors import ConfigError, MediaDecodeError

IMAGE_EXTS = frozenset(
    {"jpg", "jpeg", "png", "webp", "ppm", "pgm", "pbm", "bmp", "tif", "tiff", "gif"}
)
AV_EXTS = frozenset(
    {"mp4", "avi", "mov", "mkv", "webm", "m4v", "flv", "mpg", "mpeg",
     "flac", "mp3", "wav", "m4a", "ogg", "opus", "aac"}
)  # fmt: skip
TEXT_EXTS = frozenset({"txt", "text", "transcript"})
INT_EXTS = frozenset({"cls", "cls2", "index", "inx", "id"})
PICKLE_EXTS = frozenset({"pyd", "pickle"})
AV_MODES = ("AVDecoder", "pyav", "torch")
ALLOW_PICKLE_ENV = "ENERGON_LITE_ALLOW_PICKLE"
_MAX_PART_NAMES = 256  # part names whose decoding function a decoder keeps


def pickle_allowed_by_env() -> bool:
    """Whether the process allows unpickling sample parts (``ENERGON_LITE_ALLOW_PICKLE=1``)."""
    return os.environ.get(ALLOW_PICKLE_ENV, "").strip().lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class SampleDecoder:
    """How parts are decoded (Energon's ``SampleDecoder`` arguments, plus two of ours).

    ``image_decode``: one of ``energon_lite.decode.image.IMAGE_MODES`` ("torchrgb": float
    CHW in [0, 1]; "pil"; "torchuint8"; "rgb8" ...). ``av_decode``: "AVDecoder" (lazy
    decoder object), "pyav" (open container) or "torch" (decoded tensors).
    ``guess_content``: pick the decoder from the part's first bytes (images, audio, video)
    instead of its extension when they tell. ``decoders``: ``{extension: fn(bytes)}`` that
    replace the built-in decoding of those extensions. ``allow_pickle``: unpickle ``.pyd`` /
    ``.pickle`` parts (refused by default: unpickling runs code stored in the dataset; the
    environment variable ``ENERGON_LITE_ALLOW_PICKLE=1`` allows it for the whole process).
    ``max_image_pixels``: the most pixels one image may decode to (default 8192 x 8192), read
    from its header before decoding: a larger image raises ``MediaDecodeError``, so its sample
    is skipped and logged with its key; ``None`` leaves only Pillow's own bomb limit.
    ``image_size``: the (height, width) the task needs (an int for a square): images are
    resized to cover it keeping their aspect ratio, and JPEGs are decoded with DCT-domain
    downscaling to no less than twice that size first (``image_draft=False``: decode the
    full image, then resize; a number >= 1: draft to that many times the size, e.g. 1.0 is
    faster and up to ~2.5 grey levels RMS from the full path). "torchrgb8" keeps uint8 CHW tensors (a quarter of the bytes);
    ``energon_lite.normalize_batch`` turns a batch of them into floats on the GPU.
    """

    image_decode: str = "torchrgb"
    av_decode: str = "AVDecoder"
    video_decode_audio: bool = False
    guess_content: bool = False
    allow_pickle: bool = False
    decoders: Mapping[str, Callable[[bytes], Any]] = field(default_factory=dict, hash=False)
    image_size: tuple[int, int] | int | None = None
    image_draft: bool | float = True
    max_image_pixels: int | None = MAX_IMAGE_PIXELS
    # part name -> its decoding function, worked out once per name (``part_decoder``)
    _by_part: dict[str, Callable[[Any], Any]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        check_image_mode(self.image_decode)
        if self.image_size is not None:
            object.__setattr__(self, "image_size", _check_size(self.image_size))
        draft = self.image_draft
        if not isinstance(draft, (bool, int, float)) or (draft is not False and draft < 1):
            raise ConfigError(
                f"SampleDecoder(image_draft={draft!r}): True, False or a factor >= 1.0"
            )
        budget = self.max_image_pixels
        if budget is not None and (
            not isinstance(budget, int) or isinstance(budget, bool) or budget < 1
        ):
            raise ConfigError(
                f"SampleDecoder(max_image_pixels={budget!r}): a number of pixels >= 1, or None "
                "for Pillow's own limit only"
            )
        if self.av_decode not in AV_MODES:
            raise ConfigError(f"unknown av_decode={self.av_decode!r}; allowed: {list(AV_MODES)}")
        for ext, fn in self.decoders.items():
            if not callable(fn):
                raise ConfigError(f"SampleDecoder(decoders={{{ext!r}: ...}}) is not callable")
        object.__setattr__(
            self, "decoders", {ext.lower().lstrip("."): fn for ext, fn in self.decoders.items()}
        )

    def config(self) -> dict[str, Any]:
        """The arguments, as Energon's ``SampleDecoder.config()`` (to compare two decoders)."""
        return {
            "image_decode": self.image_decode,
            "av_decode": self.av_decode,
            "video_decode_audio": self.video_decode_audio,
            "guess_content": self.guess_content,
        }

    def part_decoder(self, part: str) -> Callable[[Any], Any]:
        """What :meth:`decode_part` does with part ``part``'s bytes, as one function, worked
        out once per part name (a dataset's samples repeat a few names): the extension is
        looked up once, not per sample. Guessing from the content (or a subclass's own
        ``decode_part``) decides per sample."""
        fn = self._by_part.get(part)
        if fn is not None:
            return fn
        ext = part.rsplit(".", 1)[-1].lower()
        direct = not self.guess_content and type(self).decode_part is SampleDecoder.decode_part
        if ext in self.decoders and direct:
            fn = self.decoders[ext]
        elif direct and ext in IMAGE_EXTS:
            from energon_lite.decode.image import decode_image  # where decoding happens only

            fn = functools.partial(
                decode_image,
                mode=self.image_decode,
                size=cast("tuple[int, int] | None", self.image_size),  # normalised at init
                draft=self.image_draft,
                max_pixels=self.max_image_pixels,
                name=part,
            )
        elif direct and ext in TEXT_EXTS:
            fn = _utf8
        else:
            fn = functools.partial(self.decode_part, part)
        if len(self._by_part) >= _MAX_PART_NAMES:
            self._by_part.clear()
        self._by_part[part] = fn
        return fn

    def decode_part(self, part: str, data: bytes) -> Any:
        """Decode one part's bytes according to its extension (or content, if guessing)."""
        ext = part.rsplit(".", 1)[-1].lower()
        if ext in self.decoders:
            return self.decoders[ext](data)
        if self.guess_content and isinstance(data, (bytes, bytearray, memoryview)):
            ext = guess_extension(data) or ext
        if ext in IMAGE_EXTS:
            from energon_lite.decode.image import decode_image

            size = cast("tuple[int, int] | None", self.image_size)  # normalised at init
            return decode_image(
                data,
                self.image_decode,
                size,
                self.image_draft,
                max_pixels=self.max_image_pixels,
                name=part,
            )
        if ext in TEXT_EXTS:
            return bytes(data).decode("utf-8")
        if ext == "json":
            try:
                return json.loads(data)
            except (ValueError, RecursionError) as exc:  # also a 100,000-digit integer
                raise MediaDecodeError(f"part {part!r}: not readable as JSON: {exc}") from None
        if ext in INT_EXTS:
            return int(data)
        if ext == "npy":
            return np.load(io.BytesIO(data), allow_pickle=False)
        if ext == "npz":
            return dict(np.load(io.BytesIO(data), allow_pickle=False))
        if ext in ("msgpack", "mpk", "mp"):
            return msgpack.unpackb(data, raw=False)
        if ext in ("pth", "pt"):
            import torch

            return torch.load(io.BytesIO(data), weights_only=True)
        if ext in PICKLE_EXTS:
            if not (self.allow_pickle or pickle_allowed_by_env()):
                raise ConfigError(
                    f"part {part!r} is a pickle; unpickling runs code stored in the dataset, so "
                    "it is refused by default. If you trust this dataset, allow it in code with "
                    f"SampleDecoder(allow_pickle=True) or for the process with {ALLOW_PICKLE_ENV}=1"
                )
            return pickle.loads(data)
        if ext in AV_EXTS:
            require_av(f"part {part!r}")  # a crude dataset's parts are first known here
            from energon_lite.av import decode_av_part

            return decode_av_part(data, self.av_decode, self.video_decode_audio)
        return data

    def decode(
        self,
        raw: dict[str, Any] | str,
        parts: frozenset[str] | bytes | None = None,
        types: Mapping[str, str] | None = None,
    ) -> Any:
        """Decode the parts of a raw sample (only ``parts`` if given); keys stay as they are.

        ``types``: what a part holds when its name is no extension (a table's columns):
        ``{name: ext}`` decodes that part as ``ext``, ``"auto"`` by its first bytes, and ``""``
        keeps the value as it is (a column its reader already decoded).
        Energon's form ``decode(file_name, data)`` decodes one file's bytes.
        """
        if isinstance(raw, str):
            if not isinstance(parts, (bytes, bytearray, memoryview)):
                raise ConfigError(f"SampleDecoder.decode({raw!r}, data): data must be bytes")
            return self.decode_part(raw, bytes(parts))
        wanted = parts if isinstance(parts, frozenset) else None
        out: dict[str, Any] = {}
        for name, value in raw.items():
            kind = None if types is None else types.get(name)
            if name.startswith("__") or (wanted is not None and name not in wanted) or kind == "":
                out[name] = value
            else:
                if kind is not None:
                    guessed = guess_extension(value) if kind == "auto" else kind
                    name_as = f"{name}.{guessed}" if guessed else name
                try:
                    out[name] = self.part_decoder(name if kind is None else name_as)(value)
                except ConfigError as exc:
                    raise ConfigError(f"sample {raw.get('__key__')!r}: {exc}") from None
                except MediaDecodeError as exc:  # the file and the sample, for the log
                    shard = raw.get("__shard__")
                    where = f"{shard}: " if shard else ""
                    raise MediaDecodeError(f"{where}sample {raw.get('__key__')!r}: {exc}") from None
                except OSError as exc:  # Pillow's: not an image, truncated ...
                    raise MediaDecodeError(_cannot_decode(raw, name, value, exc)) from None
        return out

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        """Decode every part of a raw sample dict (Energon's ``decoder(sample)``)."""
        return self.decode(sample)


def _utf8(data: Any) -> str:
    return bytes(data).decode("utf-8")


def _cannot_decode(raw: dict[str, Any], part: str, data: Any, exc: OSError) -> str:
    """Which sample, part and shard failed to decode, and why, without Pillow's in-memory
    file object (``cannot identify image file <_io.BytesIO object at 0x...>``)."""
    shard = raw.get("__shard__")
    where = f"sample {raw.get('__key__')!r} part {part!r}" + (f" of {shard}" if shard else "")
    if type(exc).__name__ == "UnidentifiedImageError":
        head = bytes(data[:8]).hex(" ") if isinstance(data, (bytes, bytearray)) else "?"
        why = f"not an image Pillow can read ({len(data)} bytes, starting {head})"
    else:
        why = str(exc)
    return f"{where}: cannot decode: {type(exc).__name__}: {why}"


def _check_size(size: Any) -> tuple[int, int]:
    pair = (size, size) if isinstance(size, int) else size
    if (
        not isinstance(pair, (tuple, list))
        or len(pair) != 2
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in pair)
    ):
        raise ConfigError(
            f"SampleDecoder(image_size={size!r}): expected (height, width) or one int, each >= 1"
        )
    return int(pair[0]), int(pair[1])


def require_av(where: str, parts: frozenset[str] | None = None) -> None:
    """Refuse when video/audio must be decoded without PyAV: at open where the parts a
    sample factory decodes are known (``parts``), else (None) unconditionally, as the decoder
    does for each video/audio part of a crude dataset, whose parts are known only then."""
    if parts is not None and not any(part.rsplit(".", 1)[-1] in AV_EXTS for part in parts):
        return
    if importlib.util.find_spec("av") is None:
        raise ConfigError(
            f"{where} holds video/audio, which needs PyAV: pip install 'energon-lite[av]'"
        )
