"""How the V2 scheduler makes room when a generation step or a context finds no pages
(tensorrt_llm/_torch/pyexecutor/scheduler/scheduler_v2.py, REFERENCE.md §4): suspend started
requests from the tail of the active list, then recompute-pause them (their cache freed, their
context recomputed later); for a context with no tier below the GPU, ``preempt_for_pages``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kvlab.core.request import Request, RequestState
from kvlab.sched.base import ScheduledBatch, SchedulerBase


@dataclass(slots=True)
class RecomputePauseState:
    """Recompute-pause frontier and victims of one pass (the real _RecomputePauseState)."""

    frontier: int
    victim_indices: set[int] = field(default_factory=set)


def contains(requests: Sequence[Request], request: Request) -> bool:
    return any(other is request for other in requests)


class RoomMaking(SchedulerBase):
    """The ladder's steps, mixed into kvlab.sched.scheduler.Scheduler."""

    _inflight: frozenset[str]
    enable_recompute_pause: bool

    def _try_allocate_generation(self, request: Request) -> bool:
        """The manager's ``try_allocate_generation``, its resume asked first: a resumed request
        runs again, even when its growth is refused."""
        if request.state is RequestState.SUSPENDED and not self._runs_if(
            self.manager.resume(request), request
        ):
            return False
        return self.manager.try_allocate_generation(request)

    def _suspend(self, request: Request) -> None:
        """The real ``suspend_request``: the cache goes inactive (its pages may move down)."""
        self.manager.suspend(request)
        request.num_suspensions += 1
        self._set_state(request, RequestState.SUSPENDED)

    def _is_victim_candidate(self, request: Request) -> bool:
        """Started and not in flight (the real ``_is_recompute_pause_candidate``)."""
        return request.is_started and request.request_id not in self._inflight

    def _is_evictable(self, request: Request) -> bool:
        """A candidate with an active cache (the real ``_is_evictable``; no host-room check)."""
        return self._is_victim_candidate(request) and request.state is RequestState.RUNNING

    def _evict_for_generation(
        self,
        request: Request,
        requests: Sequence[Request],
        index: int,
        end: int,
        batch: ScheduledBatch,
    ) -> tuple[bool, int]:
        """The real ``_try_evict_for_gen``: suspend started requests from the tail (never ones
        already visited) until the step fits."""
        while end > index:
            victim_index = next(
                (i for i in range(end - 1, index, -1) if self._is_evictable(requests[i])), None
            )
            if victim_index is None:
                break
            victim = requests[victim_index]
            self._suspend(victim)
            batch.paused_requests.append(victim)
            end = victim_index
            if self._try_allocate_generation(request):
                return True, end
        return False, end

    def _recompute_pause_for_generation(
        self,
        request: Request,
        requests: Sequence[Request],
        index: int,
        end: int,
        pause_state: RecomputePauseState,
        batch: ScheduledBatch,
    ) -> tuple[bool, int]:
        """The real ``_try_recompute_pause_for_gen``: free started requests' caches from the
        tail; with a tier below (``can_evict``), ones suspended this pass too."""
        can_evict = self.manager.can_evict
        while True:
            victim_index = next(
                (
                    i
                    for i in range(pause_state.frontier - 1, index, -1)
                    if i not in pause_state.victim_indices
                    and self._is_victim_candidate(requests[i])
                    and (can_evict or not contains(batch.paused_requests, requests[i]))
                ),
                None,
            )
            if victim_index is None and can_evict:  # fall back to one suspended this pass
                victim = next(
                    (c for c in batch.paused_requests if self._is_victim_candidate(c)), None
                )
                if victim is not None:
                    victim_index = next(i for i, c in enumerate(requests) if c is victim)
            if victim_index is None:
                return False, end
            victim = requests[victim_index]
            if contains(batch.paused_requests, victim):
                batch.paused_requests.remove(victim)
            self._recompute_pause(victim)
            batch.recompute_paused_requests.append(victim)
            pause_state.victim_indices.add(victim_index)
            pause_state.frontier = min(pause_state.frontier, victim_index)
            success = self._try_allocate_generation(request)
            if not success and can_evict:
                success, end = self._evict_for_generation(request, requests, index, end, batch)
            if success:
                return True, end

    def _preempt_for_pages(
        self, request: Request, batch: ScheduledBatch, preempted: list[Request]
    ) -> bool:
        """The real ``_try_preempt_for_pages``: with no tier below and recompute pause on, free
        the newest started, active request not scheduled this pass; True when one was."""
        if self.manager.has_cache_tier_below_gpu or not self.enable_recompute_pause:
            return False
        for victim in reversed(self._active):
            if (
                victim is request
                or not self._is_evictable(victim)
                or contains(batch.generation_requests, victim)
                or contains(batch.context_requests, victim)
            ):
                continue
            self._recompute_pause(victim)
            batch.recompute_paused_requests.append(victim)
            preempted.append(victim)
            return True
        return False
