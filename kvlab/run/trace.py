"""The record of a run: a ``StepRecord`` per step and ``Event``s, plain tuples until
``to_pandas`` builds a DataFrame at the edge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterator

    import pandas as pd

    from kvlab.core.cause import Reason


class StepRecord(NamedTuple):
    """The state after one scheduler iteration and its execution."""

    step: int
    free_blocks: int
    used_blocks: int
    host_blocks: int  # pages held in the host tier by suspended requests
    running: int  # holding a device cache
    waiting: int  # active, no cache (suspended ones not counted here)
    queued: int  # in the executor's queue, not yet handed to the scheduler
    suspended: int
    num_context: int  # context chunks scheduled this step
    num_generation: int  # generation steps scheduled this step
    tokens_scheduled: int
    num_paused: int  # suspended this step
    num_recompute_paused: int
    rejected_total: int
    finished_total: int
    stalled_passes: int  # the stall detector's counter after this pass


class Event(NamedTuple):
    """Something that happened to one request at one step; a rejection or an abort carries its
    reason."""

    step: int
    kind: str  # see EVENT_KINDS
    request_id: str
    reason: Reason | None = None


EVENT_KINDS = (
    "rejected",
    "started",
    "first_token",
    "finished",
    "suspended",
    "recompute_paused",
    "aborted",
    "engine_stopped",
)


@dataclass(repr=False, eq=False)
class Trace:
    """Step records and events of one run."""

    steps: list[StepRecord] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, index: int) -> StepRecord:
        return self.steps[index]

    def __iter__(self) -> Iterator[StepRecord]:
        return iter(self.steps)

    def column(self, name: str) -> list[int]:
        """One metric over the run, e.g. ``trace.column("free_blocks")``."""
        if name not in StepRecord._fields:
            raise ValueError(f"name must be one of {list(StepRecord._fields)}, got {name!r}")
        position = StepRecord._fields.index(name)
        return [record[position] for record in self.steps]

    def to_pandas(self) -> pd.DataFrame:
        """The step records as a DataFrame, one row per step."""
        import pandas as pd

        return pd.DataFrame(self.steps, columns=StepRecord._fields)

    def __repr__(self) -> str:
        return f"Trace({len(self.steps)} steps, {len(self.events)} events)"
