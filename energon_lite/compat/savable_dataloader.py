"""``SavableDataLoader``: energon_lite's ``SavableLoader`` under Energon's name and arguments."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from energon_lite.compat.arguments import loader_options
from energon_lite.loader.api import SavableDataset, SavableLoader, check_loader_options

T_sample = TypeVar("T_sample", covariant=True)


class SavableDataLoader(SavableLoader, Generic[T_sample]):
    """``SavableDataLoader(dataset, worker_config=..., **options)`` as in Energon.

    Takes the arguments ``get_savable_loader`` takes (Energon's checkpoint and gc knobs are
    accepted and have nothing to tune; ``cache_pool`` is refused) and saves/restores exactly
    with ``save_state_rank()`` / ``restore_state_rank()``.
    """

    def __init__(self, dataset: SavableDataset, **options: Any) -> None:
        super().__init__(
            dataset, **check_loader_options(dataset, loader_options(dataset, dict(options)))
        )
