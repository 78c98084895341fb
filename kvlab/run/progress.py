"""Progress bars for anything that may take more than a second (sweeps, policy comparisons,
multi-rank runs): tqdm.auto, shown only once a second has passed, gone when done."""

from __future__ import annotations

import os
from collections.abc import Iterable


def progress(
    iterable: Iterable | None = None,
    desc: str = "",
    total: int | None = None,
    unit: str = "it",
):
    """A tqdm.auto bar (a notebook widget in Jupyter, text elsewhere) that appears after 1 s;
    none where TQDM_DISABLE is set (the walkthrough's kernels: a bar cannot erase itself in an
    executed notebook, and tqdm's notebook bar does not read the variable itself)."""
    from tqdm.auto import tqdm

    return tqdm(
        iterable,
        desc=desc,
        total=total,
        unit=unit,
        delay=1.0,
        leave=False,
        disable=bool(os.environ.get("TQDM_DISABLE")),
    )


def rank_progress(enabled: bool, world_size: int):
    """The bar of a multi-rank run's lockstep iterations, or None when not ``enabled``."""
    return progress(desc=f"{world_size} ranks, lockstep iterations", unit="it") if enabled else None
