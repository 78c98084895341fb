"""Progress bars for anything that may take more than a second (sweeps, policy comparisons,
multi-rank runs): tqdm.auto, shown only once a second has passed, gone when done."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any


def progress(
    iterable: Iterable[Any] | None = None,
    desc: str = "",
    total: int | None = None,
    unit: str = "it",
) -> Any:
    """A tqdm.auto bar that appears after 1 s; none where TQDM_DISABLE is set (an executed
    notebook's bar cannot erase itself, and tqdm's notebook bar does not read the variable)."""
    from tqdm.auto import tqdm

    disable = bool(os.environ.get("TQDM_DISABLE"))
    return tqdm(
        iterable, desc=desc, total=total, unit=unit, delay=1.0, leave=False, disable=disable
    )


def rank_progress(enabled: bool, world_size: int) -> Any:
    """The bar of a multi-rank run's lockstep iterations, or None when not ``enabled``."""
    return progress(desc=f"{world_size} ranks, lockstep iterations") if enabled else None
