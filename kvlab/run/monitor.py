"""RunMonitor: what a multi-rank run's ranks record as they go, in shared memory, so that the
parent can still say where every request was and what each rank did when a rank dies, is
killed or hangs (kvlab.run.supervisor reads it). kvlab's own: the real executor has no such
record; its ranks' logs are what a failure leaves."""

from __future__ import annotations

import time
from collections.abc import Mapping

from kvlab.core.request import RequestState

#: A request's state as :class:`RunMonitor` stores it (1 + the index; 0: none recorded yet).
MONITOR_STATES = (
    RequestState.WAITING,
    RequestState.RUNNING,
    RequestState.FINISHED,
    RequestState.REJECTED,
)


class RunMonitor:
    """The process mode's shared record, written by the ranks as they run and read by the
    parent for a rank that cannot report (it died, or was killed): where each request was routed,
    its last state and the step of it; each rank's step, pool, whether it waits in a collective
    and when it was last heard from; whether the Fault fired. Shared memory, because a rank that
    exits at once (``os._exit``, SIGKILL) loses what a Queue had not yet sent. kvlab's own: the
    real executor has no such record (its ranks' logs are what a failure leaves)."""

    _FIELDS = 6  # per rank: step, waiting, blocks, capacity_tokens, max_seq_len, max_blocks_per_seq

    def __init__(self, ctx, config):
        n, world = len(config.requests), config.world_size
        self._index = {r.request_id: i for i, r in enumerate(config.requests)}
        self._requests = ctx.RawArray("q", [-1, 0, 0] * n)  # rank, 1 + state, step
        self._ranks = ctx.RawArray("q", self._FIELDS * world)
        self._heard = ctx.RawArray("d", world)  # time.monotonic(): one clock for every process
        self._fired = ctx.RawValue("q", 0)

    # --- written by the ranks
    def _set(self, rank: int, field_: int, value: int) -> None:
        self._ranks[rank * self._FIELDS + field_] = value
        self._heard[rank] = time.monotonic()

    def at_step(self, rank: int, step: int) -> None:
        self._set(rank, 0, step)

    def waiting(self, rank: int, waiting: bool) -> None:
        self._set(rank, 1, int(waiting))

    def built(
        self,
        rank: int,
        blocks: int,
        capacity_tokens: int,
        max_seq_len: int,
        max_blocks_per_seq: int,
    ) -> None:
        for i, value in enumerate((blocks, capacity_tokens, max_seq_len, max_blocks_per_seq)):
            self._set(rank, 2 + i, value)

    def fault_fired(self) -> None:
        self._fired.value = 1

    def routed(self, assignment: Mapping[str, int]) -> None:
        for request_id, rank in assignment.items():
            self._requests[3 * self._index[request_id]] = rank

    def states(self, rank: int, requests, step: int) -> None:
        for request in requests:
            i = 3 * self._index[request.request_id]
            code = 1 + MONITOR_STATES.index(request.state.status)
            if self._requests[i + 1] != code:
                self._requests[i + 1], self._requests[i + 2] = code, step
        self._heard[rank] = time.monotonic()

    # --- read by the parent
    def step(self, rank: int) -> int:
        return self._ranks[rank * self._FIELDS]

    def is_waiting(self, rank: int) -> bool:
        return bool(self._ranks[rank * self._FIELDS + 1])

    def pool(self, rank: int) -> tuple[int, int, int, int]:
        """(blocks, capacity_tokens, max_seq_len, max_blocks_per_seq); zeros before the build."""
        base = rank * self._FIELDS + 2
        return tuple(self._ranks[base : base + 4])

    def heard(self, rank: int) -> float:
        return self._heard[rank]

    def last_heard(self) -> float:
        """When any rank was last heard from (0.0 before the first): the watchdog's clock."""
        return max(self._heard)

    @property
    def fired(self) -> bool:
        return bool(self._fired.value)

    def request(self, request_id: str) -> tuple[int, str | None, int]:
        """(rank it was routed to or -1, its last recorded state or None, the step of it)."""
        i = 3 * self._index[request_id]
        rank, code, step = self._requests[i : i + 3]
        return rank, (MONITOR_STATES[code - 1] if code else None), step


__all__ = ["MONITOR_STATES", "RunMonitor"]
