"""Prefix-aware scheduling in the V2 scheduler (``_prefix_skip_enabled``,
``_collect_contributed_blocks``, tensorrt_llm/_torch/pyexecutor/scheduler/scheduler_v2.py;
REFERENCE.md §10): a first chunk that may reuse is prepared before its budget, so the reused
prefix moves its start; and a first chunk whose first new block another context commits this
pass waits one pass to reuse it instead of computing it twice."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvlab.core.request import Request
from kvlab.sched.base import SchedulerBase
from kvlab.sched.context_plan import ContextPlan, PassBudget, ScheduleAction

if TYPE_CHECKING:  # pragma: no cover
    from kvlab.core.prefix_cache import BlockKey


class PrefixAwareSkip(SchedulerBase):
    """The prefix-aware steps, mixed into kvlab.sched.scheduler.Scheduler."""

    _inflight: frozenset[str]
    chunked_prefill: bool
    enable_prefix_aware_scheduling: bool

    #: the flag, block reuse, and per-block commits (the real ``_prefix_skip_enabled``)
    _prefix_skip_enabled: bool = False
    #: a request with prefix hashes was admitted: before, no probe can find a key
    _admitted_hashes: bool = False

    if TYPE_CHECKING:  # the scheduler's own steps

        def _plan_context(
            self, request: Request, budget_left: int | None, sized_from: int | None = None
        ) -> ContextPlan | None: ...
        def _prepare(self, request: Request) -> bool: ...

    def _enqueue(self, request: Request) -> None:
        if request.prefix_hashes:
            self._admitted_hashes = True

    def _collect_contributed_blocks(self, pending: list[Request]) -> set[BlockKey] | None:
        """The first new blocks of the context continuations in flight, or None when the skip
        cannot fire this pass (off, no first chunk pending, or one alone with nothing in flight
        or continuing), so that no probe is paid."""
        if not (self._prefix_skip_enabled and self._admitted_hashes):
            return None  # (kvlab's shortcut: a prompt without hashes has no key to probe)
        candidates = sum(1 for r in pending if r.is_first_context_chunk)
        if candidates == 0:
            return None
        in_flight = [
            r
            for r in self._active
            if r.request_id in self._inflight
            and not r.is_context_finished
            and not r.is_first_context_chunk
        ]
        if not in_flight and candidates < 2 and all(r.is_first_context_chunk for r in pending):
            return None
        probe = self.manager.probe_first_new_block_key
        return {key for key in map(probe, in_flight) if key is not None}

    def _prepare_then_plan(
        self, request: Request, budget: PassBudget
    ) -> tuple[ScheduleAction, ContextPlan | None]:
        """``prepare_context`` first, then the plan from what is left. With prefix-aware
        scheduling off the budget sees the context as before prepare: non-chunked, checked
        whole before prepare; chunked, the chunk sized from it."""
        sized_from = (
            None if self.enable_prefix_aware_scheduling else request.context_remaining_length
        )
        if (
            sized_from is not None
            and not self.chunked_prefill
            and self._plan_context(request, budget.remaining_tokens) is None
        ):
            return ScheduleAction.STOP, None
        if not self._prepare(request):
            return (ScheduleAction.SKIP if self.chunked_prefill else ScheduleAction.STOP), None
        plan = self._plan_context(request, budget.remaining_tokens, sized_from)
        return (ScheduleAction.STOP if plan is None else ScheduleAction.SCHEDULED), plan
