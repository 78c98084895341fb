"""RunMonitor: what the ranks of a process-mode run record as they go, in shared memory, so
that the parent can still say where every request was and what each rank did when a rank dies,
is killed or hangs. kvlab's own: the real executor's ranks leave logs."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from multiprocessing.context import BaseContext
from typing import Any

from kvlab.core.request import Request, RequestState

#: A request's state as :class:`RunMonitor` stores it (1 + the index; 0: none recorded yet).
MONITOR_STATES = tuple(RequestState)
_FIELDS = 6  # per rank: step, waiting, then the pool: blocks, capacity, max_seq_len, width


class RunMonitor:
    """Shared memory, because a rank that exits at once (``os._exit``, SIGKILL) loses what a
    Queue had not yet sent: each request's rank, last state and its step; each rank's step,
    pool, whether it waits in a collective and when it was last heard from; the Fault fired."""

    def __init__(self, ctx: BaseContext, requests: Sequence[Request], world_size: int):
        self._index = {r.request_id: i for i, r in enumerate(requests)}
        self._requests: Any = ctx.RawArray("q", [-1, 0, 0] * len(requests))  # rank, state, step
        self._ranks: Any = ctx.RawArray("q", _FIELDS * world_size)
        self._heard: Any = ctx.RawArray("d", world_size)  # time.monotonic(): one clock for all
        self._fired: Any = ctx.RawValue("q", 0)

    # --- written by the ranks
    def _set(self, rank: int, first: int, values: Iterable[int]) -> None:
        for i, value in enumerate(values, start=rank * _FIELDS + first):
            self._ranks[i] = value
        self._heard[rank] = time.monotonic()

    def at_step(self, rank: int, step: int) -> None:
        self._set(rank, 0, [step])

    def waiting(self, rank: int, waiting: bool) -> None:
        self._set(rank, 1, [int(waiting)])

    def built(self, rank: int, pool: Sequence[int]) -> None:
        self._set(rank, 2, pool)

    def fault_fired(self) -> None:
        self._fired.value = 1

    def routed(self, assignment: Mapping[str, int]) -> None:
        for request_id, rank in assignment.items():
            self._requests[3 * self._index[request_id]] = rank

    def states(self, rank: int, requests: Iterable[Request], step: int) -> None:
        for request in requests:
            i = 3 * self._index[request.request_id]
            code = 1 + MONITOR_STATES.index(request.state.status)
            if self._requests[i + 1] != code:
                self._requests[i + 1], self._requests[i + 2] = code, step
        self._heard[rank] = time.monotonic()

    # --- read by the parent
    def step(self, rank: int) -> int:
        return int(self._ranks[rank * _FIELDS])

    def is_waiting(self, rank: int) -> bool:
        return bool(self._ranks[rank * _FIELDS + 1])

    def pool(self, rank: int) -> tuple[int, int, int, int]:
        """(blocks, capacity_tokens, max_seq_len, max_blocks_per_seq); zeros before the build."""
        base = rank * _FIELDS + 2
        blocks, capacity, max_seq_len, width = self._ranks[base : base + 4]
        return blocks, capacity, max_seq_len, width

    def heard(self, rank: int) -> float:
        return float(self._heard[rank])

    def last_heard(self) -> float:
        """When any rank was last heard from (0.0 before the first): the watchdog's clock."""
        return float(max(self._heard))

    @property
    def fired(self) -> bool:
        return bool(self._fired.value)

    def request(self, request_id: str) -> tuple[int, RequestState | None, int]:
        """(rank it was routed to or -1, its last recorded state or None, the step of it)."""
        i = 3 * self._index[request_id]
        rank, code, step = self._requests[i : i + 3]
        return rank, (MONITOR_STATES[code - 1] if code else None), step
