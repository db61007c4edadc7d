"""Energon's decoding arguments of ``get_train_dataset`` / ``get_val_dataset``.

``auto_decode=False`` keeps every part raw (``task_encoder.decoder = None``);
``image_decode``, ``av_decode``, ``video_decode_audio`` build the task encoder's
``SampleDecoder`` (deprecated in Energon: set ``decoder`` on the TaskEncoder instead);
``handler`` is ignored with a warning (Energon's: use ``WorkerConfig(global_error_handler=)``).
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

from energon_lite.decode.decoder import SampleDecoder
from energon_lite.errors import ConfigError

DECODER_KWARGS = ("image_decode", "av_decode", "video_decode_audio")


def apply_decoder_kwargs(kwargs: dict[str, Any], task_encoder: Any) -> Any:
    """Pop Energon's decoding arguments from ``kwargs``; the task encoder to use with them
    (a shallow copy with its ``decoder`` replaced, or ``task_encoder`` itself if none given)."""
    auto_decode = kwargs.pop("auto_decode", True)
    given = {name: kwargs.pop(name) for name in DECODER_KWARGS if name in kwargs}
    if "handler" in kwargs:
        kwargs.pop("handler")
        warnings.warn(
            "handler= is Energon's deprecated argument and is ignored; pass "
            "WorkerConfig(global_error_handler=...) instead",
            DeprecationWarning,
            stacklevel=3,
        )
    if auto_decode and not given:
        return task_encoder
    if not auto_decode:
        decoder = None
    else:
        warnings.warn(
            f"{sorted(given)} on get_*_dataset are Energon's deprecated decoder arguments; set "
            f"`decoder = SampleDecoder({', '.join(f'{k}={v!r}' for k, v in given.items())})` "
            "on your TaskEncoder instead",
            DeprecationWarning,
            stacklevel=3,
        )
        decoder = SampleDecoder(**given)
        current = getattr(task_encoder, "decoder", None)
        from energon_lite.task_encoder import TaskEncoder

        default = TaskEncoder.decoder
        if current is not None and current is not default and current != decoder:
            raise ConfigError(
                f"the task encoder already sets decoder={current}; the arguments {given} "
                "would replace it: set one or the other"
            )
    replaced = copy.copy(task_encoder)
    replaced.decoder = decoder
    return replaced
