"""Crude data (Energon's names): samples that stay dicts until the TaskEncoder cooks them.

``CrudeSample`` is the dict a crude dataset yields (decoded parts plus ``__key__``,
``__restore_key__``, ``__subflavors__``, ``__sources__``). Its attributes ``aux_stores``
(the leaf's ``aux:`` FileStores by name) and ``primary_store`` (its own dataset, read by
file name) are what cookers receive as keyword arguments. The ``dataset.yaml`` class of a
crude tar dataset is :class:`energon_lite.shards.dataset.CrudeWebdataset`; the cook
functions and their marker are in :mod:`energon_lite.task_encoder.cooking`.
"""

from __future__ import annotations

from typing import Any


class CrudeSample(dict):
    """A crude sample: a dict of parts and key fields, to be cooked."""

    aux_stores: dict[str, Any] | None = None
    primary_store: Any = None
